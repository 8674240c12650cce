"""The plugin's way to the API server: kubeconfig read like kubectl, the controller's REST client.

`load_target(kubeconfig, context, namespace)` resolves the configuration as kubectl does: the
`--kubeconfig` file, else every file of `KUBECONFIG` (merged, missing ones skipped), else
`~/.kube/config`; the `--context` or the current context; the namespace from `-n`, else the
context's, else `default`. The `kubernetes` package's loader does the reading (auth plugins,
client certificates, tokens), so the plugin authenticates exactly like the official client.

`Kube` is the controller's `RESTClient` (paths from `Resource`, raw JSON, the server's `Status`
as `rest.errors.ApiError`) for that namespace, with the plugin's own choices: one attempt per
call (a short-lived command fails fast and says so; nothing is ever sent twice), and a server
that cannot be reached is a one-line `PluginError`, not a urllib3 exception. The plugin keeps the
`kubernetes` package's `Configuration` (its websocket exec needs one, and its loader knows the
legacy auth providers the controller refuses); `cluster_config` and `ConfigurationCredentials`
hand the same server, TLS files and per-request auth header to the `RESTClient`, so both paths
authenticate alike.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config

from controller.meta import Resource
from controller.plugin.errors import PluginError
from controller.rest.client import RESTClient
from controller.rest.config import ClusterConfig
from controller.rest.request import Request

USER_AGENT = "kubectl-torchrun"

DEFAULT_KUBECONFIG = os.path.join("~", ".kube", "config")
REQUEST_TIMEOUT = 30.0
k8s_config: Any = _k8s_config  # an untyped package
_UNREACHABLE = (urllib3.exceptions.HTTPError, OSError)


def kubeconfig_files(flag: str | None, environ: Mapping[str, str]) -> list[str]:
    """The kubeconfig files kubectl would read, existing ones only; `PluginError` when none.

    An explicit `--kubeconfig` must exist; `KUBECONFIG` lists files separated by `os.pathsep`,
    of which kubectl skips missing ones."""
    if flag:
        path = os.path.expanduser(flag)
        if not os.path.isfile(path):
            raise PluginError(f"kubeconfig {flag} does not exist")
        return [path]
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates = listed or [DEFAULT_KUBECONFIG]
    found = [os.path.expanduser(p) for p in candidates if os.path.isfile(os.path.expanduser(p))]
    if not found:
        where = f"KUBECONFIG={environ['KUBECONFIG']}" if listed else DEFAULT_KUBECONFIG
        raise PluginError(f"no kubeconfig: {where} has no file; set KUBECONFIG or pass --kubeconfig")
    return found


def _context_namespace(config_file: str, context: str | None) -> str | None:
    contexts, active = k8s_config.list_kube_config_contexts(config_file=config_file)
    chosen = active if context is None else next((c for c in contexts if c.get("name") == context), None)
    if chosen is None:
        raise PluginError(f"context {context} is not in the kubeconfig")
    ns = (chosen.get("context") or {}).get("namespace")
    return str(ns) if ns else None


def _current_context(files: Sequence[str]) -> str | None:
    """kubectl's current context: the first file that sets one wins (the `kubernetes` package's
    merger lets the last one win, so the plugin decides and passes it explicitly)."""
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                config = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as exc:
            raise PluginError(f"invalid kubeconfig {path}: {exc}") from None
        if isinstance(config, dict) and config.get("current-context"):
            return str(config["current-context"])
    return None


@dataclass(frozen=True)
class Target:
    """Where the commands act: the API server's configuration and the namespace."""

    configuration: k8s_client.Configuration
    namespace: str


def load_target(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    environ: Mapping[str, str] = os.environ,
) -> Target:
    """Resolve server, credentials and namespace as kubectl does (see the module docstring)."""
    files = kubeconfig_files(kubeconfig, environ)
    config_file = os.pathsep.join(files)
    try:
        context = context or _current_context(files)
        ns = namespace or _context_namespace(config_file, context) or "default"
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config(
            config_file=config_file, context=context, client_configuration=configuration, persist_config=False
        )
    except k8s_config.ConfigException as exc:
        raise PluginError(f"invalid kubeconfig ({config_file}): {exc}") from None
    return Target(configuration=configuration, namespace=ns)


def cluster_config(configuration: k8s_client.Configuration) -> ClusterConfig:
    """The `RESTClient`'s view of a loaded `Configuration` (the loader wrote data-form
    certificates to files; the auth header comes from `ConfigurationCredentials`)."""
    return ClusterConfig(
        host=str(configuration.host),
        ca_file=configuration.ssl_ca_cert or None,
        cert_file=configuration.cert_file or None,
        key_file=configuration.key_file or None,
        insecure_skip_tls_verify=not configuration.verify_ssl,
        tls_server_name=configuration.tls_server_name or None,
        proxy_url=configuration.proxy or None,
    )


class ConfigurationCredentials:
    """The auth header of a `Configuration`, asked per request: its exec and auth-provider hooks
    refresh an expired token when asked."""

    def __init__(self, configuration: k8s_client.Configuration) -> None:
        self.configuration = configuration

    def headers(self) -> dict[str, str]:
        settings = cast(dict[str, dict[str, Any]], self.configuration.auth_settings())
        return {str(a["key"]): str(a["value"]) for a in settings.values() if a.get("value")}

    def client_cert(self) -> tuple[bytes, bytes] | None:
        return None

    def unauthorized(self) -> None:
        pass


class Kube(RESTClient):
    """The controller's `RESTClient` for one namespace, as the plugin uses it: each call is one
    attempt, and an API server that cannot be reached is a one-line `PluginError`."""

    def __init__(self, target: Target) -> None:
        configuration = target.configuration
        super().__init__(
            cluster_config(configuration),
            pool_size=configuration.connection_pool_maxsize,  # the `kubernetes` package's: a stream per rank
            timeout=REQUEST_TIMEOUT,
            max_attempts=1,
            user_agent=USER_AGENT,
            credentials=ConfigurationCredentials(configuration),
        )
        self.configuration = configuration  # the websocket exec (upload.py) connects with it
        self.namespace = target.namespace
        self.server = str(target.configuration.host)

    def send(self, req: Request, *, stream: bool, read_timeout: float | None) -> urllib3.BaseHTTPResponse:
        try:
            return super().send(req, stream=stream, read_timeout=read_timeout)
        except _UNREACHABLE as exc:
            raise PluginError(f"cannot reach the API server at {self.server}: {_reason(exc)}") from None

    def open_lines(
        self, res: Resource, name: str, subresource: str, params: Mapping[str, str]
    ) -> Iterator[bytes]:
        """Start a streaming GET of `name`'s subresource (pod logs) now, raising `ApiError` at
        once if the server refuses; the returned iterator yields its body line by line as it
        arrives, with no read timeout, until the server ends it (a dropped connection ends it
        too)."""
        path = res.path(self.namespace, name, subresource)
        req = Request("get", "GET", path, res.key, params=params)
        return _lines(self.send(req, stream=True, read_timeout=None))


def _lines(resp: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    pending = b""
    try:
        for chunk in resp.stream(64 * 1024, decode_content=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            yield from (line + b"\n" for line in lines)
    except _UNREACHABLE:
        pass
    finally:
        resp.release_conn()
    if pending:
        yield pending


def _reason(exc: BaseException) -> str:
    """The innermost cause of a connection failure, without urllib3's pool object noise."""
    inner = getattr(exc, "reason", None) or exc
    text = str(inner)
    if "Connection refused" in text:
        return "connection refused"
    if "timed out" in text:
        return "connection timed out"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "unknown host"
    return text.split(": ", 1)[-1] if "object at 0x" in text else text
