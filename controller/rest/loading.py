"""`load_config` and `current_namespace`: the `ClusterConfig` and namespace the controller's flags
select, loaded as client-go loads them.

`load_config(kubeconfig, context)` follows the controller's flag: an explicit kubeconfig path
wins; without one, the pod's service account when running in a pod (KUBERNETES_SERVICE_HOST
set: its token, re-read as the kubelet rotates it, and its CA), else kubectl's loading rules:
every file of $KUBECONFIG merged (`kubeconfig.py`), else ~/.kube/config.

Guarantees: anything unusable raises `ConfigError` with one line naming the file, entry and
field — never a traceback from a YAML or base64 parser. The `kubernetes` package is not used:
importing it costs the controller ~33 MiB.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from controller.rest import kubeconfig as files
from controller.rest.config import ClusterConfig, ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def load_config(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> ClusterConfig:
    """The configuration the controller's flags select (module docstring); `ConfigError` if unusable."""
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
