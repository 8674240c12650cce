"""The plugin's way to the API server: kubeconfig read like kubectl, raw JSON calls, one-line errors.

`connect(kubeconfig, context, namespace)` resolves the configuration as kubectl does: the
`--kubeconfig` file, else every file of `KUBECONFIG` (merged, missing ones skipped), else
`~/.kube/config`; the `--context` or the current context; the namespace from `-n`, else the
context's, else `default`. The `kubernetes` package's loader does the reading (auth plugins,
client certificates, tokens), so the plugin authenticates exactly like the official client.

`Kube` sends raw JSON requests over the urllib3 pool that package builds for the configuration:
no generated model classes, so what the server sends is what the commands read, and a failure is
always an `ApiError` (an error Status, with the server's own message; a 422 quotes every field
cause) or a `PluginError` saying the server cannot be reached. Nothing here retries writes.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config
from kubernetes.client.rest import RESTClientObject

from controller.plugin.errors import ApiError, PluginError
from controller.rest.request import request_headers

USER_AGENT = "kubectl-torchrun"

DEFAULT_KUBECONFIG = os.path.join("~", ".kube", "config")
REQUEST_TIMEOUT = 30.0
MERGE_PATCH = "application/merge-patch+json"
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
    configuration.retries = 1  # fail fast on an unreachable server: one line, not a minute of retries
    return Target(configuration=configuration, namespace=ns)


def status_message(status: int, body: bytes) -> tuple[str, str]:
    """`(reason, message)` of an error response: the Status's own words; a 422 lists each
    field cause as `field: message` (what the user has to fix)."""
    try:
        st = json.loads(body)
    except ValueError:
        st = None
    if not isinstance(st, dict):
        text = body.decode("utf-8", "replace").strip()
        return "", text or f"the API server answered HTTP {status}"
    reason = str(st.get("reason") or "")
    causes = (st.get("details") or {}).get("causes") or []
    if status == 422 and causes:
        fields = "; ".join(f"{c.get('field') or '(object)'}: {c.get('message', '')}".strip() for c in causes)
        return reason, f"the API server refused it: {fields}"
    return reason, str(st.get("message") or f"the API server answered HTTP {status}")


class Kube:
    """Raw JSON requests to one API server for one namespace; see the module docstring."""

    def __init__(self, target: Target) -> None:
        self.configuration = target.configuration
        self.namespace = target.namespace
        self.server = str(target.configuration.host)
        self._pool = RESTClientObject(target.configuration).pool_manager

    def url(self, path: str, query: Sequence[tuple[str, str]] = ()) -> str:
        return self.server + path + (("?" + urllib.parse.urlencode(query)) if query else "")

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        query: Sequence[tuple[str, str]],
        content_type: str | None,
        stream: bool,
    ) -> urllib3.BaseHTTPResponse:
        data = None if body is None else json.dumps(body).encode()
        try:
            resp = self._pool.request(
                method,
                self.url(path, query),
                body=data,
                headers=request_headers(
                    self.configuration, USER_AGENT, content_type or ("application/json" if data else None)
                ),
                preload_content=not stream,
                timeout=urllib3.Timeout(connect=10.0, read=None if stream else REQUEST_TIMEOUT),
            )
        except _UNREACHABLE as exc:
            raise PluginError(f"cannot reach the API server at {self.server}: {_reason(exc)}") from None
        if resp.status >= 400:
            payload = resp.data if not stream else resp.read()
            reason, message = status_message(resp.status, payload)
            raise ApiError(resp.status, reason, message)
        return resp

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Sequence[tuple[str, str]] = (),
        content_type: str | None = None,
    ) -> Any:
        """One call; the decoded JSON answer. Raises `ApiError` or `PluginError` (unreachable)."""
        resp = self._send(method, path, body, query, content_type, stream=False)
        return json.loads(resp.data) if resp.data else None

    def open_lines(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Iterator[bytes]:
        """Start a streaming GET (pod logs) now, raising `ApiError` at once if the server refuses;
        the returned iterator yields its body line by line as it arrives, until the server ends
        it (a dropped connection ends it too)."""
        return _lines(self._send("GET", path, None, query, None, stream=True))


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
