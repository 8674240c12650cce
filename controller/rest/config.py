"""Where the API server is and how to authenticate: `ClusterConfig`, loaded as client-go loads it.

`load_config(kubeconfig, context)` follows the controller's flag: an explicit kubeconfig path
wins; without one, the pod's service account when running in a pod (KUBERNETES_SERVICE_HOST
set: its token, re-read as the kubelet rotates it, and its CA), else kubectl's loading rules:
every file of $KUBECONFIG merged (`kubeconfig.py`), else ~/.kube/config.

Guarantees: a `ClusterConfig` is plain data (no I/O, no secrets in its repr); what changes while
the process runs (a rotated token file, an exec plugin's credential) is read per request by
`credentials.py`. Anything unusable raises `ConfigError` with one line naming the file, entry
and field — never a traceback from a YAML or base64 parser. The `kubernetes` package is not
used: importing it costs the controller ~33 MiB.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ConfigError(ValueError):
    """The configuration cannot be used; the message says where and why, in one line."""


@dataclass(frozen=True)
class ExecConfig:
    """A client.authentication.k8s.io credential plugin: the command kubectl would run."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"
    user: str = ""  # the kubeconfig's user entry, for messages
    install_hint: str = ""
    cluster_info: str | None = None  # KUBERNETES_EXEC_INFO's spec.cluster (JSON) with provideClusterInfo


@dataclass(frozen=True)
class ClusterConfig:
    """An API server and the credentials to use with it. `*_data` fields hold PEM bytes (decoded
    from the kubeconfig's base64); a token file wins over `token`, as in client-go."""

    host: str
    ca_file: str | None = None
    ca_data: bytes | None = None
    cert_file: str | None = None
    cert_data: bytes | None = None
    key_file: str | None = None
    key_data: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    exec: ExecConfig | None = None


def load_config(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> ClusterConfig:
    """The configuration the controller's flags select (module docstring); `ConfigError` if unusable."""
    from controller.rest import kubeconfig as files  # noqa: PLC0415  (it imports the types above)

    if kubeconfig:
        return files.load(files.paths(kubeconfig, environ), context)
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster_config(environ, service_account_dir)
    return files.load(files.paths(None, environ), context)


def in_cluster_config(
    environ: Mapping[str, str], service_account_dir: Path = SERVICE_ACCOUNT_DIR
) -> ClusterConfig:
    """The pod's service account: the API server from the environment the kubelet sets, its
    token file (re-read per request, at most once a minute) and its CA."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError(
            "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set"
        )
    token, ca = service_account_dir / "token", service_account_dir / "ca.crt"
    if not os.access(token, os.R_OK):
        raise ConfigError(f"in-cluster config: cannot read the service account token {token}")
    server = f"[{host}]" if ":" in host else host  # an IPv6 address
    return ClusterConfig(
        host=f"https://{server}:{port}",
        ca_file=str(ca) if ca.is_file() else None,
        token_file=str(token),
    )


def current_namespace(
    kubeconfig: str | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> str:
    """The namespace kubectl would use: the kubeconfig context's, the pod's own, or `default`."""
    from controller.rest import kubeconfig as files  # noqa: PLC0415

    try:
        ns = files.context_namespace(files.paths(kubeconfig, environ))
    except ConfigError:
        ns = None
    if ns:
        return ns
    try:
        own = (service_account_dir / "namespace").read_text(encoding="utf-8").strip()
    except OSError:
        own = ""
    return own or "default"
