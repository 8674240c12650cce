"""RESTClient: the Kubernetes API verbs, raw JSON in and out.

Each verb turns its arguments into one `Request` value — path from the `Resource`, query, body,
content type, field manager — and hands it to the sender (`request.py`): rate limit, write fence,
timeout, retry policy and metrics are the same for every verb and decided there; `watch` opens a
`WatchStream` (`watch.py`). The keywords that tune one call (`CallOptions`: retry budget, timeout,
fence; a write's `WriteOptions` add its field manager) are declared once and taken alike by every
other verb; the client's own settings are `RequestSender`'s. Hot paths (informers, reconcilers) get
and send `dict`s decoded straight from the response bytes.

Guarantees: a verb sends exactly the request its arguments describe (writes carry
`fieldManager`, deletes a `DeleteOptions` body); it returns the server's answer decoded, or
raises (`ApiError` for an error status, `LeadershipLostError` when the fence refused a write, a
urllib3/OS error when no answer came after the retries the request policy allows).
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

from controller.meta import Resource
from controller.rest.request import Request, RequestSender, is_retryable
from controller.rest.watch import WatchEvent, WatchStream, open_watch

__all__ = [
    "FIELD_MANAGER",
    "CallOptions",
    "RESTClient",
    "WatchEvent",
    "WatchStream",
    "WriteOptions",
    "is_retryable",
]

FIELD_MANAGER = "torchrun-controller"
PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


class CallOptions(TypedDict, total=False):
    """How one call is sent: the same keywords on every verb but `watch`, fields of its `Request`."""

    attempts: int | None  # the retry budget (1: a single try); None: the client's `max_attempts`
    timeout: float | None  # bounds each try as a whole, connect included; None: the client's
    fenced: bool  # False bypasses the write fence (only the leader elector's own Lease writes)


class WriteOptions(CallOptions, total=False):
    """A write's options: the call's, and the `fieldManager` it is sent with (`FIELD_MANAGER`)."""

    field_manager: str


class RESTClient(RequestSender):
    """The verbs over one sender (its pool, rate limiter, fence and metrics); module docstring.
    Constructed as a `RequestSender`, whose keywords (and their defaults) it takes as they are."""

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
        accept: str = "application/json",
        **options: Unpack[CallOptions],
    ) -> dict[str, Any]:
        """One JSON request with retries for transient failures; returns the decoded body.

        `options` (`CallOptions`) override the client's retry budget and timeout, or bypass the
        write fence; `accept` names a JSON type the server answers with instead of
        application/json (the service-account issuer's keys).
        """
        return self.do(
            Request(verb, method, path, resource, params, body, content_type, accept=accept, **options)
        )

    def get(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        subresource: str | None = None,
        **options: Unpack[CallOptions],
    ) -> dict[str, Any]:
        path = res.path(namespace, name, subresource)
        return self.request("get", "GET", path, res.key, **options)

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
        **options: Unpack[CallOptions],
    ) -> dict[str, Any]:
        params = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": limit,
            "continue": continue_token,
            "resourceVersion": resource_version if not continue_token else None,
        }
        return self.request("list", "GET", res.path(namespace), res.key, params=params, **options)

    def create(
        self,
        res: Resource,
        obj: dict[str, Any],
        namespace: str | None = None,
        **options: Unpack[WriteOptions],
    ) -> dict[str, Any]:
        ns = namespace or obj.get("metadata", {}).get("namespace")
        return self._write("create", "POST", res, res.path(ns), obj, **options)

    def update(
        self,
        res: Resource,
        obj: dict[str, Any],
        subresource: str | None = None,
        **options: Unpack[WriteOptions],
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        path = res.path(meta.get("namespace"), meta["name"], subresource)
        verb = "update" if subresource is None else f"update/{subresource}"
        return self._write(verb, "PUT", res, path, obj, **options)

    def update_status(
        self, res: Resource, obj: dict[str, Any], **options: Unpack[WriteOptions]
    ) -> dict[str, Any]:
        return self.update(res, obj, subresource="status", **options)

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        force: bool | None = None,
        **options: Unpack[WriteOptions],
    ) -> dict[str, Any]:
        verb = "patch" if subresource is None else f"patch/{subresource}"
        path = res.path(namespace, name, subresource)
        content_type = PATCH_TYPES[patch_type]
        return self._write(verb, "PATCH", res, path, patch, content_type=content_type, force=force, **options)

    def apply(
        self,
        res: Resource,
        obj: dict[str, Any],
        *,
        subresource: str | None = None,
        **options: Unpack[WriteOptions],
    ) -> dict[str, Any]:
        """Server-side apply (JSON is YAML), taking ownership of conflicting fields."""
        meta = obj["metadata"]
        name, namespace = meta["name"], meta.get("namespace")
        return self.patch(
            res, name, obj, namespace, patch_type="apply", subresource=subresource, force=True, **options
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
        **options: Unpack[CallOptions],
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            body["preconditions"] = {"uid": uid}
        return self.request("delete", "DELETE", res.path(namespace, name), res.key, body=body, **options)

    def evict(
        self,
        res: Resource,
        name: str,
        namespace: str,
        *,
        uid: str | None = None,
        **options: Unpack[CallOptions],
    ) -> dict[str, Any]:
        """Evict a pod through the Eviction API (policy/v1): the pod gets the DisruptionTarget
        condition, so a Job's podFailurePolicy can tell it from a failure of the program."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        path = res.path(namespace, name, "eviction")
        return self.request("create/eviction", "POST", path, res.key, body=body, **options)

    def _write(
        self,
        verb: str,
        method: str,
        res: Resource,
        path: str,
        body: Any,
        *,
        content_type: str | None = None,
        force: bool | None = None,
        field_manager: str = FIELD_MANAGER,
        **options: Unpack[CallOptions],
    ) -> dict[str, Any]:
        """A write of `body`, with its `fieldManager` (and `force`, when given) in the query."""
        params: dict[str, Any] = {"fieldManager": field_manager}
        if force is not None:
            params["force"] = "true" if force else "false"
        return self.request(
            verb, method, path, res.key, params=params, body=body, content_type=content_type, **options
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
        `request.WATCH_READ_TIMEOUT`), so a dead connection cannot hang a watch for the server's
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
