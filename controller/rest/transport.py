"""The connection pool to one API server: TLS as the `ClusterConfig` says, built without the
`kubernetes` package.

Guarantees: the server is verified against the config's CA (file or data) and only it, else the
system's; `insecure_skip_tls_verify` turns verification off; `tls_server_name` is both the SNI
name and the name checked. A client certificate given as data is written to a private (0600)
temporary file only for as long as `ssl` takes to load it. An exec plugin's client certificate
may change at run time: `Transport.pool()` then builds a new pool with it (connections already
open keep the old one until they close). TLS material that cannot be loaded raises `ConfigError`
saying which.
"""

from __future__ import annotations

import os
import ssl
import tempfile
import threading
from typing import Any

import urllib3

from controller.rest.config import ClusterConfig, ConfigError
from controller.rest.credentials import CredentialSource


def ssl_context(config: ClusterConfig, client_cert: tuple[bytes, bytes] | None = None) -> ssl.SSLContext:
    """The client TLS context for `config` (module docstring), with `client_cert` (PEM) if given."""
    try:
        if config.insecure_skip_tls_verify:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            cadata = config.ca_data.decode("ascii", errors="replace") if config.ca_data else None
            ctx = ssl.create_default_context(cafile=config.ca_file, cadata=cadata)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"cannot load the cluster's certificate authority: {exc}") from None
    try:
        if config.cert_file and config.key_file:
            ctx.load_cert_chain(config.cert_file, config.key_file)
        elif config.cert_data and config.key_data:
            _load_cert_data(ctx, config.cert_data, config.key_data)
        if client_cert is not None:
            _load_cert_data(ctx, *client_cert)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"cannot load the client certificate and key: {exc}") from None
    return ctx


def _load_cert_data(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """`ssl` loads chains from files only: one private file, removed as soon as it is loaded."""
    fd, path = tempfile.mkstemp(prefix="client-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cert.rstrip(b"\n") + b"\n" + key)
        ctx.load_cert_chain(path)
    finally:
        os.unlink(path)


def pool_manager(
    config: ClusterConfig, maxsize: int, client_cert: tuple[bytes, bytes] | None
) -> urllib3.PoolManager:
    kwargs: dict[str, Any] = {"maxsize": maxsize}
    if config.host.startswith("https://"):
        kwargs["ssl_context"] = ssl_context(config, client_cert)
        # urllib3 sets the context's verify mode from cert_reqs: say it, or it verifies anyway
        kwargs["cert_reqs"] = "CERT_NONE" if config.insecure_skip_tls_verify else "CERT_REQUIRED"
        if config.tls_server_name:
            kwargs["server_hostname"] = config.tls_server_name
    if config.proxy_url:
        return urllib3.ProxyManager(config.proxy_url, **kwargs)
    return urllib3.PoolManager(**kwargs)


class Transport:
    """The pool for one config: built at once (so bad TLS material fails at start-up), rebuilt
    only when a credential plugin hands out a new client certificate."""

    def __init__(self, config: ClusterConfig, credentials: CredentialSource, maxsize: int) -> None:
        self.config = config
        self.credentials = credentials
        self.maxsize = maxsize
        self._lock = threading.Lock()
        # an exec plugin's certificate is asked for at the first request, not here
        self._cert: tuple[bytes, bytes] | None = None
        self._pool = pool_manager(config, maxsize, None)

    def pool(self) -> urllib3.PoolManager:
        cert = self.credentials.client_cert()
        with self._lock:
            if cert != self._cert:
                self._pool = pool_manager(self.config, self.maxsize, cert)
                self._cert = cert
            return self._pool
