"""Credentials per request: the Authorization header for a `ClusterConfig`, kept fresh.

- A token file is re-read once its last read is a minute old (client-go's cached file token
  source): the kubelet rotates projected service-account tokens, so a long-running controller
  must not keep the first one. A failed re-read keeps the last token (or the config's `token`).
- An exec credential plugin runs when there is no credential yet, when the one it gave has
  expired (its `expirationTimestamp`), and after the server answered 401 (`unauthorized`), as
  client-go does; its token, or client certificate (`client_cert`), is cached in between. A
  plugin that fails raises `ConfigError` with its command and the last line of its stderr.
- Basic auth and a static token never change.

Thread-safe: one lock guards the cached values, and at most one plugin runs at a time.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from controller.clock import Clock, RealClock
from controller.rest.config import ClusterConfig, ConfigError, ExecConfig

TOKEN_FILE_PERIOD = 60.0  # seconds between reads of a token file
EXEC_TIMEOUT = 120.0  # seconds a credential plugin may take (it may fetch from a cloud's API)


class CredentialSource(Protocol):
    """What a sender asks for each request; `Credentials` is the one for a `ClusterConfig`."""

    def headers(self) -> dict[str, str]:
        """The authentication headers for the next request (none: {})."""

    def client_cert(self) -> tuple[bytes, bytes] | None:
        """A client certificate and key (PEM) that changes at run time, else None."""

    def unauthorized(self) -> None:
        """The server answered 401 with the current credentials."""


@dataclass(frozen=True)
class ExecCredential:
    """What a credential plugin printed: a token or a client certificate and key, and when it expires."""

    token: str | None = None
    cert: bytes | None = None
    key: bytes | None = None
    expires: float | None = None  # seconds since the epoch; None: until the server refuses it


def run_exec_plugin(plugin: ExecConfig) -> ExecCredential:
    """Run the plugin as kubectl does (non-interactive) and read its ExecCredential."""
    spec: dict[str, Any] = {"interactive": False}
    if plugin.cluster_info is not None:
        spec["cluster"] = json.loads(plugin.cluster_info)
    info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec}
    env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
    what = f"{plugin.user}: exec plugin {plugin.command}"
    try:
        done = subprocess.run(
            [plugin.command, *plugin.args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=EXEC_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        hint = f" ({' '.join(plugin.install_hint.split())})" if plugin.install_hint else ""
        raise ConfigError(f"{what}: not found{hint}") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{what}: {exc}") from None
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise ConfigError(f"{what}: exited {done.returncode}: {lines[-1] if lines else 'no message'}")
    return parse_exec_credential(done.stdout, plugin.api_version, what)


def parse_exec_credential(stdout: bytes, api_version: str, what: str = "exec plugin") -> ExecCredential:
    """The credential in a plugin's output; `ConfigError` naming the field that is wrong."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        raise ConfigError(f"{what}: its output is not an ExecCredential (not JSON)") from None
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise ConfigError(f"{what}: its output is not an ExecCredential (kind)")
    if doc.get("apiVersion") != api_version:
        raise ConfigError(
            f"{what}: apiVersion {doc.get('apiVersion')!r} is not the kubeconfig's {api_version!r}"
        )
    status = doc.get("status")
    if not isinstance(status, dict):
        raise ConfigError(f"{what}: the ExecCredential has no status")
    token, cert, key = status.get("token"), status.get("clientCertificateData"), status.get("clientKeyData")
    if bool(cert) != bool(key):
        raise ConfigError(f"{what}: status needs both clientCertificateData and clientKeyData")
    if not token and not cert:
        raise ConfigError(f"{what}: status has neither token nor clientCertificateData")
    if not all(v is None or isinstance(v, str) for v in (token, cert, key)):
        raise ConfigError(f"{what}: status.token, clientCertificateData and clientKeyData must be strings")
    expires = status.get("expirationTimestamp")
    return ExecCredential(
        token=token or None,
        cert=cert.encode() if cert else None,
        key=key.encode() if key else None,
        expires=_rfc3339(expires, what) if expires else None,
    )


def _rfc3339(value: Any, what: str) -> float:
    try:
        text = str(value)
        return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text).timestamp()
    except ValueError:
        raise ConfigError(f"{what}: status.expirationTimestamp {value!r} is not an RFC 3339 time") from None


class Credentials:
    """The `CredentialSource` of one `ClusterConfig` (module docstring)."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        clock: Clock | None = None,
        run: Callable[[ExecConfig], ExecCredential] = run_exec_plugin,
    ) -> None:
        self.config = config
        self.clock = clock or RealClock()
        self._run = run
        self._lock = threading.Lock()
        self._token = config.token
        self._token_read_at: float | None = None
        self._exec: ExecCredential | None = None

    def headers(self) -> dict[str, str]:
        cfg = self.config
        token = self._exec_credential().token if cfg.exec else self._current_token()
        if token:
            return {"Authorization": f"Bearer {token}"}
        if cfg.username is not None and cfg.password is not None:
            pair = base64.b64encode(f"{cfg.username}:{cfg.password}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        return {}

    def client_cert(self) -> tuple[bytes, bytes] | None:
        if self.config.exec is None:
            return None
        cred = self._exec_credential()
        return (cred.cert, cred.key) if cred.cert and cred.key else None

    def unauthorized(self) -> None:
        with self._lock:
            self._exec = None  # the next request runs the plugin again

    def _current_token(self) -> str | None:
        path = self.config.token_file
        if path is None:
            return self._token
        with self._lock:
            now = self.clock.now()
            if self._token_read_at is None or now - self._token_read_at >= TOKEN_FILE_PERIOD:
                self._token_read_at = now
                try:
                    with open(path, encoding="utf-8") as f:
                        self._token = f.read().strip() or self._token
                except OSError:
                    pass  # keep the last token: the kubelet may be mid-rotation
            return self._token

    def _exec_credential(self) -> ExecCredential:
        assert self.config.exec is not None
        with self._lock:
            cred = self._exec
            if cred is None or (cred.expires is not None and self.clock.wall() >= cred.expires):
                cred = self._exec = self._run(self.config.exec)
            return cred
