"""Where the API server is and how to authenticate: `ClusterConfig`, and `ConfigError`.

Guarantees: a `ClusterConfig` is plain data (no I/O, no secrets in its repr); what changes while
the process runs (a rotated token file, an exec plugin's credential) is read per request by
`credentials.py`. Loading one is `loading.py`'s (the kubeconfig files: `kubeconfig.py`); anything
unusable there raises `ConfigError`, one line naming the file, entry and field. This module
imports neither, so both import it and nothing imports in a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
