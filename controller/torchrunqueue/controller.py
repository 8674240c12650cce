"""The TorchrunQueue reconciler: is this template usable, and how many jobs use it?

`Ready` is True only when every check passes, in this order, the first failure giving the
reason (`api.reasons.QueueReason`) and a message that names the field:
  * `InvalidSpec` — the spec does not parse (a bad quantity, an unknown scheduler, a bad
    `allowOverrides` entry) or fails `validate_queue` (e.g. /dev/shm does not fit in memory);
  * `StorageClassNotFound` — a storage class it names does not exist;
  * `SchedulerNotInstalled` — the cluster does not serve the scheduler's API (KAI's Queue and
    PodGroup, Kueue, scheduler-plugins or Volcano PodGroups);
  * kai-scheduler only: `ParentQueueNotFound` — `parentKaiQueue` names no KAI Queue; or the KAI
    Queue was rejected (`KaiQueueRejected`).
For kai-scheduler the controller also keeps the KAI Queue in sync (`kaiqueue.py`) and reports it
in `KaiQueueReady`; the condition is removed when the queue stops using KAI, and the KAI Queues
it owned are deleted. Jobs of a queue that is not Ready wait (their controller reads `Ready`)
and start once it turns True: queue events re-enqueue them, and a queue that is not Ready is
looked at again every `recheck_after` seconds, since what it waits for (a CRD, a storage class,
a parent KAI Queue) is not watched. A queue whose scheduler does not gang-schedule never falls
back to another scheduler: a gang silently run pod by pod is worse than a clear wait.
`status.jobs` counts the queue's jobs by phase, from the cache; `observedGeneration` is the
generation the conditions describe. Status is written only when it changed.
Nothing is read from the API on a pass but discovery (cached, `rest/discovery.py`): StorageClasses
and KAI Queues come from cluster-wide informers (`OptionalInformers`, started the first time a
queue needs them and their API is served), jobs and queues from the shared ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import structlog

from controller.api import (
    Condition,
    InvalidObjectError,
    QueueConditionType,
    QueueJobCounts,
    Scheduler,
    TorchrunQueue,
    TorchrunQueueStatus,
    find_condition,
    remove_condition,
    set_condition,
    stored_conditions,
    to_json,
    validate_queue,
)
from controller.api.kueue import API_VERSIONS as KUEUE_API_VERSIONS
from controller.api.reasons import QueueReason
from controller.api.resources import JOB_QUEUE_INDEX, TORCHRUNQUEUES
from controller.cache import Lister, OptionalInformers
from controller.clock import utc_now
from controller.meta import Resource
from controller.rest.client import RESTClient
from controller.rest.discovery import Discovery
from controller.runtime import Result
from controller.runtime.status import update_status
from controller.torchrunqueue.kaiqueue import KAI_PODGROUPS_VERSION, KAI_QUEUES, ConditionState, KaiQueues

log = structlog.get_logger("torchrunqueue")

STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False)
RECHECK_AFTER = 10.0

# the APIs each scheduler must serve — each entry a group version, or alternatives of which one
# will do — and what to install when it does not
SCHEDULER_APIS: dict[Scheduler, tuple[tuple[tuple[str, ...], ...], str]] = {
    Scheduler.KAI: (((KAI_QUEUES.api_version,), (KAI_PODGROUPS_VERSION,)), "KAI-Scheduler"),
    Scheduler.KUEUE: ((KUEUE_API_VERSIONS,), "Kueue"),
    Scheduler.COSCHEDULING: ((("scheduling.x-k8s.io/v1alpha1",),), "scheduler-plugins (coscheduling)"),
    Scheduler.VOLCANO: ((("scheduling.volcano.sh/v1beta1",),), "Volcano"),
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of the checks: `Ready`, and `KaiQueueReady` for kai-scheduler queues."""

    ready: ConditionState
    kai: ConditionState | None = None


def _not_ready(reason: QueueReason, message: str, kai: ConditionState | None = None) -> Verdict:
    return Verdict(ConditionState(False, reason, message), kai)


class TorchrunQueueReconciler:
    def __init__(
        self,
        client: RESTClient,
        *,
        queues: Lister,
        jobs: Lister,
        informers: OptionalInformers,
        discovery: Discovery,
        recheck_after: float = RECHECK_AFTER,
    ):
        self.client = client
        self.queues = queues
        self.jobs = jobs
        self.informers = informers
        self.discovery = discovery
        self.kai_queues = KaiQueues(client, informers)
        self.recheck_after = recheck_after

    def reconcile(self, key: str) -> Result | None:
        raw = self.queues.get(key)
        if raw is None:
            return None  # its KAI Queue goes with it (owner reference)
        try:
            queue = TorchrunQueue.from_json(raw)
        except InvalidObjectError as exc:
            status = TorchrunQueueStatus(conditions=stored_conditions(raw))
            self._write(raw, status, _not_ready(QueueReason.INVALID_SPEC, str(exc)))
            return None  # the spec must change first, and that is an event
        verdict = self._check(queue)
        status = dataclasses.replace(queue.status, jobs=self._counts(queue.name))
        self._write(raw, status, verdict)
        return None if verdict.ready.ready else Result(requeue_after=self.recheck_after)

    # -- checks, in order ------------------------------------------------------------------------

    def _check(self, queue: TorchrunQueue) -> Verdict:
        errors = validate_queue(queue)
        if errors:
            return _not_ready(QueueReason.INVALID_SPEC, "; ".join(str(e) for e in errors))
        missing_sc = self._missing_storage_class(queue)
        if missing_sc:
            return _not_ready(QueueReason.STORAGE_CLASS_NOT_FOUND, missing_sc)
        scheduler = queue.spec.scheduling.scheduler
        if scheduler != Scheduler.KAI:
            self._forget_kai(queue)
        missing_api = self._missing_api(scheduler)
        if missing_api:
            kai = (
                ConditionState(False, QueueReason.KAI_NOT_INSTALLED, missing_api)
                if scheduler == Scheduler.KAI
                else None
            )
            return _not_ready(QueueReason.SCHEDULER_NOT_INSTALLED, missing_api, kai)
        if scheduler == Scheduler.KAI:
            return self._check_kai(queue)
        return Verdict(ConditionState(True, QueueReason.READY, _ready_message(queue)))

    def _missing_storage_class(self, queue: TorchrunQueue) -> str | None:
        storage = queue.spec.storage
        for path, sc in (
            ("spec.storage.workspace.storageClassName", storage.workspace.storage_class_name),
            ("spec.storage.checkpoints.storageClassName", storage.checkpoints.storage_class_name),
        ):
            if sc and not self._exists(STORAGE_CLASSES, sc):
                return f"{path}: StorageClass {sc} does not exist"
        return None

    def _missing_api(self, scheduler: Scheduler) -> str | None:
        needed = SCHEDULER_APIS.get(scheduler)
        if needed is None:
            return None
        apis, product = needed
        absent = [" or ".join(alts) for alts in apis if not any(self.discovery.served(gv) for gv in alts)]
        if not absent:
            return None
        return (
            f"spec.scheduling.scheduler: {scheduler.value} needs {product}, but the cluster does not "
            f"serve {', '.join(absent)}; jobs of this queue wait until it does"
        )

    def _check_kai(self, queue: TorchrunQueue) -> Verdict:
        parent = queue.spec.parent_kai_queue
        if parent and self.kai_queues.get(parent) is None:
            message = (
                f"spec.parentKaiQueue: KAI Queue {parent} does not exist; create it (or fix the name) "
                "and the queue becomes Ready"
            )
            return _not_ready(
                QueueReason.PARENT_QUEUE_NOT_FOUND,
                message,
                ConditionState(False, QueueReason.PARENT_QUEUE_NOT_FOUND, message),
            )
        kai = self.kai_queues.sync(queue)
        self.kai_queues.prune(queue, keep=queue.kai_queue_name)
        if not kai.ready:
            return _not_ready(kai.reason, kai.message, kai)
        return Verdict(
            ConditionState(True, QueueReason.READY, f"{_ready_message(queue)}; {kai.message}"), kai
        )

    def _forget_kai(self, queue: TorchrunQueue) -> None:
        """A queue that no longer uses KAI deletes the KAI Queues it made."""
        had_kai = find_condition(queue.status.conditions, QueueConditionType.KAI_QUEUE_READY) is not None
        if had_kai and self.discovery.served(KAI_QUEUES.api_version):
            self.kai_queues.prune(queue, keep=None)

    def _exists(self, resource: Resource, name: str) -> bool:
        cache = self.informers.lister(resource)
        return cache is not None and cache.get(name) is not None

    def _counts(self, queue: str) -> QueueJobCounts:
        counts: dict[str, int] = {}
        jobs = self.jobs.by_index(JOB_QUEUE_INDEX, queue)
        for job in jobs:
            phase = ((job.get("status") or {}).get("phase") or "Pending").lower()
            counts[phase] = counts.get(phase, 0) + 1
        fields = {f.name for f in dataclasses.fields(QueueJobCounts)}
        return QueueJobCounts(
            **{k: v for k, v in counts.items() if k in fields and k != "total"}, total=len(jobs)
        )

    # -- status ----------------------------------------------------------------------------------

    def _write(self, raw: Mapping[str, Any], status: TorchrunQueueStatus, verdict: Verdict) -> None:
        generation = int(raw["metadata"].get("generation") or 0)
        conds = _conditions(status.conditions, verdict, generation, utc_now())
        status = dataclasses.replace(status, conditions=conds, observed_generation=generation)
        if not update_status(self.client, TORCHRUNQUEUES, raw, to_json(status)):
            return
        log.info(
            "queue status",
            queue=raw["metadata"]["name"],
            ready=verdict.ready.ready,
            reason=str(verdict.ready.reason),
            kai_queue=str(verdict.kai.reason) if verdict.kai else None,
        )


def _conditions(
    current: tuple[Condition, ...], verdict: Verdict, generation: int, now: datetime
) -> tuple[Condition, ...]:
    r = verdict.ready
    conds = set_condition(current, QueueConditionType.READY, r.ready, r.reason, r.message, generation, now)
    if verdict.kai is None:
        return remove_condition(conds, QueueConditionType.KAI_QUEUE_READY)
    k = verdict.kai
    return set_condition(
        conds, QueueConditionType.KAI_QUEUE_READY, k.ready, k.reason, k.message, generation, now
    )


def _ready_message(queue: TorchrunQueue) -> str:
    return f"jobs run on nodes of {queue.spec.node_resources.gpus} GPU(s)"
