"""RESTClient: raw-JSON Kubernetes API calls over one urllib3 pool.

Hot paths (informers, reconcilers) get and send `dict`s decoded straight from the response bytes.
Each call: waits for the client-side token bucket (QPS/burst), sends with a connect+read timeout,
retries what is safe to retry (below) with tenacity, and records
`rest_client_requests_total{verb,resource,code}` and its latency.

What is retried (`is_retryable`, mirroring client-go's rest/request.go `request` and
with_retry.go `IsNextRetry`/`checkWait`):
- 429 or 5xx *with* a Retry-After header, for any verb, after that many seconds (capped at 30):
  the server itself asks us to come back (API Priority and Fairness rejects with 429 before
  handling; a 5xx with Retry-After is the server vouching that a retry is fine), as in client-go.
- Reads (GET) only: connection errors (refused, reset, closed mid-response) and 5xx without
  Retry-After (not 501), after a short jittered exponential delay. client-go retries neither
  without Retry-After except resets/EOF on GET; a GET is idempotent, so retrying it is harmless.
- Nothing else. A write (POST/PUT/PATCH/DELETE) that met a connection error, or a 5xx/429
  without Retry-After, may have reached the server and been applied; it is never sent again here:
  the error goes to the caller, whose reconcile re-reads and decides (a rate-limited requeue).
  Read timeouts are not retried either: the attempt already used its whole time budget.
With a `write_fence` (leader election), every write asks it right before it would be sent and,
refused, raises `LeadershipLostError` having sent nothing: a replica that lost the Lease cannot write.
Watches stream newline-delimited JSON events; they are not retried here (the reflector owns
that decision) but still pass through the rate limiter and metrics.
"""

from __future__ import annotations

import json
import random
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.rest import RESTClientObject
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from controller.flowcontrol import TokenBucket
from controller.meta import Resource
from controller.metrics.registry import ControllerMetrics
from controller.rest.errors import ApiError, LeadershipLostError

FIELD_MANAGER = "torchrun-controller"
# How long a watch connection may stay silent before we drop it and watch again. client-go
# notices dead connections with HTTP/2 pings (30 s idle + 15 s ping timeout); over HTTP/1.1 only
# a read timeout can. Silence alone is not proof of death: kube-apiserver bookmarks a watch about
# once a minute only while its watch cache moves past the watch's resourceVersion (any change to
# that resource type in the cluster; apiserver cache_watcher.go `process`), so a watch on an idle
# resource type can stay silent until etcd's progress notification (10 min by default). Hence
# silence ends the watch normally and the caller resumes it at once from its last resourceVersion;
# a dead connection then shows up as the resumed watch failing.
WATCH_READ_TIMEOUT = 120.0

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


def is_retryable(method: str, exc: BaseException) -> bool:
    """May a request with this HTTP method that failed with `exc` be sent again? (module doc)"""
    if isinstance(exc, ApiError):
        if exc.retry_after is not None and (exc.status == 429 or exc.status >= 500):
            return True
        return method == "GET" and exc.status >= 500 and exc.status != 501
    return method == "GET" and isinstance(exc, _CONNECTION_ERRORS)


def request_headers(configuration: Any, user_agent: str, content_type: str | None) -> dict[str, str]:
    """JSON headers with the configuration's credentials (bearer token, API key), fresh per call
    because an exec or refresh credential plugin may rotate them."""
    headers = {"Accept": "application/json", "User-Agent": user_agent}
    if content_type:
        headers["Content-Type"] = content_type
    settings = cast(dict[str, dict[str, Any]], configuration.auth_settings())
    for auth in settings.values():
        if auth.get("value"):
            headers[str(auth["key"])] = str(auth["value"])
    return headers


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
        write_fence: Callable[[], bool] | None = None,
        watch_read_timeout: float = WATCH_READ_TIMEOUT,
    ) -> None:
        configuration.connection_pool_maxsize = pool_size
        self.configuration = configuration
        self.host = configuration.host.rstrip("/")
        self._pool = RESTClientObject(configuration).pool_manager
        self._limiter = TokenBucket(qps, burst)
        self.timeout = timeout
        self.watch_read_timeout = watch_read_timeout
        self.max_attempts = max_attempts
        self.metrics = metrics or ControllerMetrics()
        self.user_agent = user_agent
        # asked right before each write is sent; False means "not the leader": send nothing
        self.write_fence = write_fence

    # -- plumbing ---------------------------------------------------------------------------

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
        timeout: float | None = None,
        fenced: bool = True,
    ) -> urllib3.BaseHTTPResponse:
        waited = self._limiter.accept()
        self.metrics.rest_rate_limiter_wait.labels(verb).observe(waited)
        query = {k: v for k, v in (params or {}).items() if v is not None}
        url = self.host + path + ("?" + urlencode(query) if query else "")
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if data is not None and content_type is None:
            content_type = "application/json"
        if fenced and method != "GET" and self.write_fence is not None and not self.write_fence():
            raise LeadershipLostError(verb, path)
        started = time.perf_counter()
        code = "<error>"
        try:
            resp = self._pool.request(
                method,
                url,
                body=data,
                headers=request_headers(self.configuration, self.user_agent, content_type),
                timeout=urllib3.Timeout(total=timeout)
                if timeout is not None
                else urllib3.Timeout(connect=10.0, read=read_timeout or self.timeout),
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
            hint = resp.headers.get("Retry-After")  # seconds only, as client-go parses it
            retry_after = float(hint) if hint and hint.isdigit() else None
            raise ApiError(resp.status, payload, verb, path, retry_after=retry_after)
        return resp

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, ApiError) and exc.retry_after is not None:
            return min(exc.retry_after, 30.0)
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
        attempts: int | None = None,
        timeout: float | None = None,
        fenced: bool = True,
    ) -> dict[str, Any]:
        """One JSON request with retries for transient failures; returns the decoded body.

        `attempts` overrides the client's retry budget (1: a single try) and `timeout` bounds
        each try as a whole, connect included; `fenced=False` bypasses the write fence (only for
        the leader elector's own Lease writes).
        """

        def attempt_log(state: RetryCallState) -> None:
            self.metrics.rest_retries.labels(verb, resource).inc()

        for attempt in Retrying(
            retry=retry_if_exception(lambda exc: is_retryable(method, exc)),
            stop=stop_after_attempt(attempts or self.max_attempts),
            wait=self._wait,
            before_sleep=attempt_log,
            reraise=True,
        ):
            with attempt:
                resp = self._send(
                    verb,
                    method,
                    path,
                    resource,
                    params=params,
                    body=body,
                    content_type=content_type,
                    timeout=timeout,
                    fenced=fenced,
                )
        payload = resp.data
        out: dict[str, Any] = json.loads(payload) if payload else {}
        return out

    # -- verbs ------------------------------------------------------------------------------

    def get(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        subresource: str | None = None,
        *,
        attempts: int | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        path = res.path(namespace, name, subresource)
        return self.request("get", "GET", path, res.key, attempts=attempts, timeout=timeout)

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
        *,
        attempts: int | None = None,
        timeout: float | None = None,
        fenced: bool = True,
    ) -> dict[str, Any]:
        ns = namespace or obj.get("metadata", {}).get("namespace")
        return self.request(
            "create",
            "POST",
            res.path(ns),
            res.key,
            params={"fieldManager": field_manager},
            body=obj,
            attempts=attempts,
            timeout=timeout,
            fenced=fenced,
        )

    def update(
        self,
        res: Resource,
        obj: dict[str, Any],
        subresource: str | None = None,
        field_manager: str = FIELD_MANAGER,
        *,
        attempts: int | None = None,
        timeout: float | None = None,
        fenced: bool = True,
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        path = res.path(meta.get("namespace"), meta["name"], subresource)
        verb = "update" if subresource is None else f"update/{subresource}"
        return self.request(
            verb,
            "PUT",
            path,
            res.key,
            params={"fieldManager": field_manager},
            body=obj,
            attempts=attempts,
            timeout=timeout,
            fenced=fenced,
        )

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

    def evict(self, res: Resource, name: str, namespace: str, *, uid: str | None = None) -> dict[str, Any]:
        """Evict a pod through the Eviction API (policy/v1): the pod gets the DisruptionTarget
        condition, so a Job's podFailurePolicy can tell it from a failure of the program."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        return self.request(
            "create/eviction", "POST", res.path(namespace, name, "eviction"), res.key, body=body
        )

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
        """Open a watch; `WatchStream.stop()` interrupts it from any thread.

        `timeout_seconds` is the server's: it ends the watch normally. Independently, a response
        not started within `watch_read_timeout` raises `ReadTimeoutError`, and a stream silent for
        that long (no event, no bookmark) ends with `WatchStream.timed_out` set (see
        WATCH_READ_TIMEOUT), so a dead connection cannot hang a watch for the server's timeout.
        """
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
            read_timeout=self.watch_read_timeout,
        )
        return WatchStream(resp)


class WatchStream:
    """Newline-delimited watch events from one streaming response. Iteration ends when the server
    ends the watch, after `stop()`, or when the connection was silent for the read timeout
    (`timed_out` is then True); other failures raise."""

    def __init__(self, resp: urllib3.BaseHTTPResponse) -> None:
        self._resp = resp
        self._stopped = False
        self.timed_out = False

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
        except urllib3.exceptions.ReadTimeoutError:
            self.timed_out = True
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
