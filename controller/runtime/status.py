"""Writing a custom resource's status: only when it changed, and conflicts as a clean retry.

`update_status` compares the new status with the cached one (`same_json`: the cache holds frozen
tuples, the new status plain JSON lists; nothing is copied to compare), PUTs the status subresource
with the cached resourceVersion when they differ, turns a 409 into a `TransientError` retried
through the rate limiter (the next pass reads the fresh object), and ignores an object deleted meanwhile.
A write the API server answers with the cached resourceVersion stored nothing (it pruned every
field that changed: a CRD older than the controller, e.g. mid-upgrade): that is no write — the
caller must not wait for its watch event, which never comes — and it is warned about once per
object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from controller.cache import same_json, thaw
from controller.errors import TransientError
from controller.meta import Resource
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError

log = structlog.get_logger("status")


def update_status(
    client: RESTClient, resource: Resource, cached: Mapping[str, Any], status: dict[str, Any]
) -> bool:
    """Write `status` if it differs from `cached`'s; True when a write happened."""
    if same_json(cached.get("status") or {}, status):
        return False
    body = thaw(cached)
    body["status"] = status
    try:
        stored = client.update_status(resource, body)
    except ApiError as exc:
        if exc.conflict:
            # rate-limited: the watch event of whoever wrote first brings the fresh object
            raise TransientError(f"{resource.kind} status conflict; retrying on a fresh read") from exc
        if exc.not_found:
            return False
        raise
    version = (cached.get("metadata") or {}).get("resourceVersion")
    if version and (stored.get("metadata") or {}).get("resourceVersion") == version:
        # nothing was stored: the API server pruned what differed (a CRD older than this
        # controller); no watch event will follow, so this is no write to wait for
        meta = cached.get("metadata") or {}
        _pruned.said(f"{resource.kind} {meta.get('namespace', '')}/{meta.get('name', '')}")
        return False
    return True


class _PrunedLog:
    """One warning per object: its status write stored nothing."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def said(self, what: str) -> None:
        if what in self._said or len(self._said) > 10_000:
            return
        self._said.add(what)
        log.warning(
            "the API server stored none of the status written: it pruned the fields that changed; "
            "is the CRD older than the controller? apply the CRDs of this release",
            object=what,
        )


_pruned = _PrunedLog()
