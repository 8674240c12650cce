"""GarbageCollector: every `interval` seconds, delete what our jobs left behind.

- Jobs, pods, Services and PVCs labelled `torchrun-job-name=<job>` whose TorchrunJob does not
  exist. The cache says who might be an orphan; a GET on the API confirms it before anything is
  deleted, so a job that was just created (and is not in our cache yet) is never harmed.
- PVCs labelled `torchrun.ai/persist=true` (persisted checkpoints) are user data: never deleted.
- Pods whose deletion is overdue (`deletionTimestamp` + `stuck_after` in the past, e.g. on a lost
  node) are force-deleted with a zero grace period.
Reads come from the informer caches; every deletion is counted in `torchrun_gc_deletions_total`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import structlog

from controller.cache import Lister
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import Resource

log = structlog.get_logger("gc")

JOB_LABEL = "torchrun-job-name"
PERSIST_LABEL = "torchrun.ai/persist"


def _parse_time(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


class GarbageCollector:
    def __init__(
        self,
        client: RESTClient,
        job_lister: Lister,
        job_resource: Resource,
        owned: Mapping[Resource, Lister],
        *,
        interval: float = 60.0,
        stuck_after: float = 60.0,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.client = client
        self.job_lister = job_lister
        self.job_resource = job_resource
        self.owned = owned
        self.interval = interval
        self.stuck_after = stuck_after
        self.metrics = metrics or client.metrics
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._loop, args=(stop,), name="gc", daemon=True)
        self._thread.start()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            try:
                self.collect()
            except Exception:
                log.exception("garbage collection pass failed")

    def collect(self, now: float | None = None) -> int:
        """One pass; returns how many objects were deleted."""
        now = datetime.now(timezone.utc).timestamp() if now is None else now
        deleted = 0
        confirmed_gone: dict[str, bool] = {}
        for resource, lister in self.owned.items():
            for obj in lister.list():
                if (self._is_orphan(obj, confirmed_gone) and self._delete(resource, obj, "orphan")) or (
                    resource.plural == "pods"
                    and self._stuck(obj, now)
                    and self._delete(resource, obj, "stuck-terminating", grace=0)
                ):
                    deleted += 1
        return deleted

    def _is_orphan(self, obj: Mapping[str, Any], confirmed_gone: dict[str, bool]) -> bool:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        job = labels.get(JOB_LABEL)
        if not job or meta.get("deletionTimestamp") or labels.get(PERSIST_LABEL) == "true":
            return False
        ns = meta.get("namespace", "")
        if self.job_lister.get(job, ns) is not None:
            return False
        key = f"{ns}/{job}"
        if key not in confirmed_gone:
            try:
                self.client.get(self.job_resource, job, ns)
                confirmed_gone[key] = False
            except ApiError as exc:
                confirmed_gone[key] = exc.not_found
        return confirmed_gone[key]

    def _stuck(self, obj: Mapping[str, Any], now: float) -> bool:
        ts = obj["metadata"].get("deletionTimestamp")
        return bool(ts) and now > _parse_time(ts) + self.stuck_after

    def _delete(self, resource: Resource, obj: Mapping[str, Any], why: str, grace: int | None = None) -> bool:
        meta = obj["metadata"]
        try:
            self.client.delete(
                resource, meta["name"], meta.get("namespace"), grace_period_seconds=grace, uid=meta.get("uid")
            )
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return False
            raise
        self.metrics.gc_deletions.labels(resource.plural).inc()
        log.info(
            "garbage collected", resource=resource.key, key=f"{meta.get('namespace')}/{meta['name']}", why=why
        )
        return True
