"""RESTClient: the Kubernetes API verbs, raw JSON in and out.

Each verb turns its arguments into one `Request` value — path from the `Resource`, query,
body, content type, field manager — and hands it to the sender (`request.py`): rate limit,
write fence, timeout, retry policy and metrics are the same for every verb and decided there;
`watch` opens a `WatchStream` (`watch.py`). Hot paths (informers, reconcilers) get and send
`dict`s decoded straight from the response bytes.

Guarantees: a verb sends exactly the request its arguments describe (writes carry
`fieldManager`, deletes a `DeleteOptions` body); it returns the server's answer decoded, or
raises (`ApiError` for an error status, `LeadershipLostError` when the fence refused a write, a
urllib3/OS error when no answer came after the retries the request policy allows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller.meta import Resource
from controller.metrics.registry import ControllerMetrics
from controller.rest.config import ClusterConfig
from controller.rest.credentials import CredentialSource
from controller.rest.request import Request, RequestSender, is_retryable
from controller.rest.watch import WATCH_READ_TIMEOUT, WatchEvent, WatchStream, open_watch

__all__ = ["FIELD_MANAGER", "RESTClient", "WatchEvent", "WatchStream", "is_retryable"]

FIELD_MANAGER = "torchrun-controller"
PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


class RESTClient(RequestSender):
    """The verbs over one sender (its pool, rate limiter, fence and metrics); module docstring."""

    def __init__(
        self,
        config: ClusterConfig,
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
        credentials: CredentialSource | None = None,
    ) -> None:
        super().__init__(
            config,
            qps=qps,
            burst=burst,
            pool_size=pool_size,
            timeout=timeout,
            max_attempts=max_attempts,
            metrics=metrics,
            user_agent=user_agent,
            write_fence=write_fence,
            credentials=credentials,
        )
        self.watch_read_timeout = watch_read_timeout

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
        accept: str = "application/json",
    ) -> dict[str, Any]:
        """One JSON request with retries for transient failures; returns the decoded body.

        `attempts` overrides the client's retry budget (1: a single try) and `timeout` bounds
        each try as a whole, connect included; `fenced=False` bypasses the write fence (only for
        the leader elector's own Lease writes); `accept` names a JSON type the server answers with
        instead of application/json (the service-account issuer's keys).
        """
        req = Request(
            verb, method, path, resource, params, body, content_type, attempts, timeout, fenced, accept
        )
        return self.do(req)

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
            content_type=PATCH_TYPES[patch_type],
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
        `watch.WATCH_READ_TIMEOUT`), so a dead connection cannot hang a watch for the server's
        timeout.
        """
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": "true" if allow_bookmarks else None,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        req = Request("watch", "GET", res.path(namespace), res.key, params=params)
        return open_watch(self, req, self.watch_read_timeout)
