"""The TorchrunQueue reconciler: is this template usable, and how many jobs use it?

`Ready` is True only when the spec parses and passes `validate_queue`, the storage classes it
names exist, and its scheduler's API is served by the cluster (KAI, Kueue, scheduler-plugins or
Volcano CRDs). Otherwise `Ready=False` with a CamelCase reason and a message naming the field;
jobs of the queue wait (their controller reads this condition) and start once it turns True —
queue events re-enqueue them. `status.jobs` counts the queue's jobs by phase, from the cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import structlog

from controller.api import (
    InvalidObjectError,
    QueueConditionType,
    QueueJobCounts,
    Scheduler,
    TorchrunQueue,
    TorchrunQueueStatus,
    set_condition,
    to_json,
    validate_queue,
)
from controller.api.resources import TORCHRUNQUEUES
from controller.cache import Lister, thaw
from controller.errors import TransientError
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import Resource
from controller.runtime import Result
from controller.torchrunqueue.discovery import Discovery

log = structlog.get_logger("torchrunqueue")

QUEUE_INDEX = "queue"
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False)

# the API each scheduler must serve, and what to install when it does not
SCHEDULER_APIS: dict[Scheduler, tuple[str, str]] = {
    Scheduler.KAI: ("scheduling.run.ai/v2", "KAI-Scheduler"),
    Scheduler.KUEUE: ("kueue.x-k8s.io/v1beta1", "Kueue"),
    Scheduler.COSCHEDULING: ("scheduling.x-k8s.io/v1alpha1", "scheduler-plugins (coscheduling)"),
    Scheduler.VOLCANO: ("scheduling.volcano.sh/v1beta1", "Volcano"),
}


def job_queue_index(obj: Mapping[str, Any]) -> list[str]:
    """Index TorchrunJobs by the queue they name."""
    queue = (obj.get("spec") or {}).get("jobQueue")
    return [queue] if queue else []


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


class TorchrunQueueReconciler:
    def __init__(
        self, client: RESTClient, *, queues: Lister, jobs: Lister, discovery: Discovery | None = None
    ):
        self.client = client
        self.queues = queues
        self.jobs = jobs
        self.discovery = discovery or Discovery(client)

    def reconcile(self, key: str) -> Result | None:
        raw = self.queues.get(key)
        if raw is None:
            return None
        try:
            queue = TorchrunQueue.from_json(raw)
        except InvalidObjectError as exc:
            self._write_conditions(raw, TorchrunQueueStatus(), False, "InvalidSpec", str(exc))
            return None
        ready, reason, message = self._check(queue)
        status = dataclasses.replace(queue.status, jobs=self._counts(queue.name))
        self._write_conditions(raw, status, ready, reason, message)
        # scheduler APIs may get installed later: look again in a while
        return None if ready else Result(requeue_after=30.0)

    def _check(self, queue: TorchrunQueue) -> tuple[bool, str, str]:
        errors = validate_queue(queue)
        if errors:
            return False, "InvalidSpec", "; ".join(str(e) for e in errors)
        storage = queue.spec.storage
        for path, sc in (
            ("spec.storage.workspace.storageClassName", storage.workspace.storage_class_name),
            ("spec.storage.checkpoints.storageClassName", storage.checkpoints.storage_class_name),
        ):
            if sc and not self._exists(STORAGE_CLASSES, sc):
                return False, "StorageClassNotFound", f"{path}: StorageClass {sc} does not exist"
        needed = SCHEDULER_APIS.get(queue.spec.scheduling.scheduler)
        if needed and not self.discovery.served(needed[0]):
            return (
                False,
                "SchedulerNotInstalled",
                f"spec.scheduling.scheduler: {queue.spec.scheduling.scheduler.value} needs {needed[1]}, "
                f"but the cluster does not serve {needed[0]}",
            )
        return True, "Ready", f"jobs run on nodes of {queue.spec.node_resources.gpus} GPU(s)"

    def _exists(self, resource: Resource, name: str) -> bool:
        try:
            self.client.get(resource, name)
            return True
        except ApiError as exc:
            if exc.not_found:
                return False
            raise

    def _counts(self, queue: str) -> QueueJobCounts:
        counts: dict[str, int] = {}
        jobs = self.jobs.by_index(QUEUE_INDEX, queue)
        for job in jobs:
            phase = ((job.get("status") or {}).get("phase") or "Pending").lower()
            counts[phase] = counts.get(phase, 0) + 1
        fields = {f.name for f in dataclasses.fields(QueueJobCounts)}
        return QueueJobCounts(
            **{k: v for k, v in counts.items() if k in fields and k != "total"}, total=len(jobs)
        )

    def _write_conditions(
        self, raw: Mapping[str, Any], status: TorchrunQueueStatus, ready: bool, reason: str, message: str
    ) -> None:
        generation = int(raw["metadata"].get("generation") or 0)
        conds = set_condition(
            status.conditions, QueueConditionType.READY, ready, reason, message, generation, _now()
        )
        status = dataclasses.replace(status, conditions=conds, observed_generation=generation)
        new = to_json(status)
        if new == thaw(raw.get("status") or {}):  # the cache holds tuples, to_json lists
            return
        body = thaw(raw)
        body["status"] = new
        try:
            self.client.update_status(TORCHRUNQUEUES, body)
        except ApiError as exc:
            if exc.conflict:
                raise TransientError("status conflict", requeue_after=0.0) from exc
            if not exc.not_found:
                raise
        log.info("queue status", queue=raw["metadata"]["name"], ready=ready, reason=reason)
