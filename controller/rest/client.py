"""RESTClient: raw-JSON Kubernetes API calls over one urllib3 pool.

Hot paths (informers, reconcilers) get and send `dict`s decoded straight from the response bytes.
Each call: waits for the client-side token bucket (QPS/burst), sends with a connect+read timeout,
retries transient failures with tenacity (connection errors, 429 and 5xx, honouring Retry-After;
never 4xx), and records `rest_client_requests_total{verb,resource,code}` and its latency.
Watches stream newline-delimited JSON events; they are not retried here (the reflector owns
that decision) but still pass through the rate limiter and metrics.
"""

from __future__ import annotations

import json
import random
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.rest import RESTClientObject
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from controller.flowcontrol import TokenBucket
from controller.metrics.registry import ControllerMetrics
from controller.rest.errors import ApiError
from controller.rest.resources import Resource

FIELD_MANAGER = "torchrun-controller"

_PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}
_CONNECTION_ERRORS = (
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.NewConnectionError,
    urllib3.exceptions.ConnectTimeoutError,
    urllib3.exceptions.MaxRetryError,
    ConnectionError,
)


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
    object: dict[str, Any]


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, ApiError):
        return exc.transient
    return isinstance(exc, _CONNECTION_ERRORS)


class RESTClient:
    def __init__(
        self,
        configuration: k8s_client.Configuration,
        *,
        qps: float = 50.0,
        burst: int = 100,
        pool_size: int = 16,
        timeout: float = 30.0,
        max_attempts: int = 5,
        metrics: ControllerMetrics | None = None,
        user_agent: str = "torchrun-controller",
    ) -> None:
        configuration.connection_pool_maxsize = pool_size
        self.configuration = configuration
        self.host = configuration.host.rstrip("/")
        self._pool = RESTClientObject(configuration).pool_manager
        self._limiter = TokenBucket(qps, burst)
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.metrics = metrics or ControllerMetrics()
        self.user_agent = user_agent

    # -- plumbing ---------------------------------------------------------------------------

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if content_type:
            headers["Content-Type"] = content_type
        settings = cast(dict[str, dict[str, Any]], self.configuration.auth_settings())
        for auth in settings.values():
            if auth.get("value"):
                headers[str(auth["key"])] = str(auth["value"])
        return headers

    def _send(
        self,
        verb: str,
        method: str,
        path: str,
        resource: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        stream: bool = False,
        read_timeout: float | None = None,
    ) -> urllib3.BaseHTTPResponse:
        waited = self._limiter.accept()
        self.metrics.rest_rate_limiter_wait.labels(verb).observe(waited)
        query = {k: v for k, v in (params or {}).items() if v is not None}
        url = self.host + path + ("?" + urlencode(query) if query else "")
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if data is not None and content_type is None:
            content_type = "application/json"
        started = time.perf_counter()
        code = "<error>"
        try:
            resp = self._pool.request(
                method,
                url,
                body=data,
                headers=self._headers(content_type),
                timeout=urllib3.Timeout(connect=10.0, read=read_timeout or self.timeout),
                preload_content=not stream,
                retries=False,
            )
            code = str(resp.status)
        finally:
            self.metrics.rest_requests.labels(verb, resource, code).inc()
            self.metrics.rest_latency.labels(verb, resource).observe(time.perf_counter() - started)
        if resp.status >= 400:
            payload = resp.read() if stream else resp.data
            if stream:
                resp.release_conn()
            err = ApiError(resp.status, payload, verb, path)
            retry_after = resp.headers.get("Retry-After")
            err.retry_after = float(retry_after) if retry_after and retry_after.isdigit() else None  # type: ignore[attr-defined]
            raise err
        return resp

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hinted = getattr(exc, "retry_after", None)
        if isinstance(hinted, float):
            return min(hinted, 30.0)
        return float(min(5.0, 0.1 * 2 ** (state.attempt_number - 1)) * (1 + random.random()))

    def request(
        self,
        verb: str,
        method: str,
        path: str,
        resource: str = "",
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        """One JSON request with retries for transient failures; returns the decoded body."""

        def attempt_log(state: RetryCallState) -> None:
            self.metrics.rest_retries.labels(verb, resource).inc()

        for attempt in Retrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(self.max_attempts),
            wait=self._wait,
            before_sleep=attempt_log,
            reraise=True,
        ):
            with attempt:
                resp = self._send(
                    verb, method, path, resource, params=params, body=body, content_type=content_type
                )
        payload = resp.data
        out: dict[str, Any] = json.loads(payload) if payload else {}
        return out

    # -- verbs ------------------------------------------------------------------------------

    def get(
        self, res: Resource, name: str, namespace: str | None = None, subresource: str | None = None
    ) -> dict[str, Any]:
        return self.request("get", "GET", res.path(namespace, name, subresource), res.key)

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        params = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": limit,
            "continue": continue_token,
            "resourceVersion": resource_version if not continue_token else None,
        }
        return self.request("list", "GET", res.path(namespace), res.key, params=params)

    def create(
        self,
        res: Resource,
        obj: dict[str, Any],
        namespace: str | None = None,
        field_manager: str = FIELD_MANAGER,
    ) -> dict[str, Any]:
        ns = namespace or obj.get("metadata", {}).get("namespace")
        return self.request(
            "create", "POST", res.path(ns), res.key, params={"fieldManager": field_manager}, body=obj
        )

    def update(
        self,
        res: Resource,
        obj: dict[str, Any],
        subresource: str | None = None,
        field_manager: str = FIELD_MANAGER,
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        path = res.path(meta.get("namespace"), meta["name"], subresource)
        verb = "update" if subresource is None else f"update/{subresource}"
        return self.request(verb, "PUT", path, res.key, params={"fieldManager": field_manager}, body=obj)

    def update_status(self, res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        return self.update(res, obj, subresource="status")

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str = FIELD_MANAGER,
        force: bool | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"fieldManager": field_manager}
        if force is not None:
            params["force"] = "true" if force else "false"
        verb = "patch" if subresource is None else f"patch/{subresource}"
        return self.request(
            verb,
            "PATCH",
            res.path(namespace, name, subresource),
            res.key,
            params=params,
            body=patch,
            content_type=_PATCH_TYPES[patch_type],
        )

    def apply(
        self,
        res: Resource,
        obj: dict[str, Any],
        *,
        subresource: str | None = None,
        field_manager: str = FIELD_MANAGER,
    ) -> dict[str, Any]:
        """Server-side apply (JSON is YAML), taking ownership of conflicting fields."""
        meta = obj["metadata"]
        return self.patch(
            res,
            meta["name"],
            obj,
            meta.get("namespace"),
            patch_type="apply",
            subresource=subresource,
            field_manager=field_manager,
            force=True,
        )

    def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = "Background",
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            body["preconditions"] = {"uid": uid}
        return self.request("delete", "DELETE", res.path(namespace, name), res.key, body=body)

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> WatchStream:
        """Open a watch. The client's read timeout is a little longer than the server's, so a dead
        connection raises instead of hanging; `WatchStream.stop()` interrupts it from any thread."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": "true" if allow_bookmarks else None,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        resp = self._send(
            "watch",
            "GET",
            res.path(namespace),
            res.key,
            params=params,
            stream=True,
            read_timeout=timeout_seconds + 30,
        )
        return WatchStream(resp)


class WatchStream:
    """Newline-delimited watch events from one streaming response."""

    def __init__(self, resp: urllib3.BaseHTTPResponse) -> None:
        self._resp = resp
        self._stopped = False

    def __iter__(self) -> Iterator[WatchEvent]:
        buf = b""
        try:
            for chunk in self._resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        ev = json.loads(line)
                        yield WatchEvent(ev["type"], ev["object"])
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
            if not self._stopped:
                raise
        finally:
            self.close()

    def stop(self) -> None:
        """Interrupt a blocked read from another thread; iteration then ends quietly."""
        self._stopped = True
        # shutting the socket down wakes a thread blocked in recv() at once (TLS included)
        sock = getattr(getattr(self._resp, "connection", None), "sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
            else:
                self._resp.shutdown()
        except (ValueError, OSError, AttributeError):  # already closed: nothing to interrupt
            pass

    def close(self) -> None:
        self._resp.close()
        self._resp.release_conn()
