"""Writing a custom resource's status: only when it changed, and conflicts as a clean retry.

`update_status` compares the new status with the cached one (`same_json`: the cache holds frozen
tuples, the new status plain JSON lists; nothing is copied to compare), PUTs the status subresource
with the cached resourceVersion when they differ, turns a 409 into a `TransientError` retried
through the rate limiter (the next pass reads the fresh object), and ignores an object deleted meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.cache import same_json, thaw
from controller.errors import TransientError
from controller.meta import Resource
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError


def update_status(
    client: RESTClient, resource: Resource, cached: Mapping[str, Any], status: dict[str, Any]
) -> bool:
    """Write `status` if it differs from `cached`'s; True when a write happened."""
    if same_json(cached.get("status") or {}, status):
        return False
    body = thaw(cached)
    body["status"] = status
    try:
        client.update_status(resource, body)
    except ApiError as exc:
        if exc.conflict:
            # rate-limited: the watch event of whoever wrote first brings the fresh object
            raise TransientError(f"{resource.kind} status conflict; retrying on a fresh read") from exc
        if exc.not_found:
            return False
        raise
    return True
