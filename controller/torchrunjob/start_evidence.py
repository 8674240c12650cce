"""What a pass knows about why its workers do not start (`starting.Evidence`), read at bounded cost.

The pods' own words (scheduler, kubelet container states) come from the cache, and their changes
bring the job back at once: a pod that shows an error is quoted at the next status write. Kueue's
words come from the Workload cache (`KueueWorkloads.hold`). Two facts live only in Events, which
no informer of ours watches (a namespace can write any number of them): the worker Job's
`FailedCreate` and a placed pod's `FailedMount`. They are listed — by field selector, the
involved object's UID and the reason, a handful of items each — only when nothing earlier in
`starting.py`'s precedence already explains the wait, and only for what has waited `SETTLE`
seconds (a Job with fewer pods than nodes; a pod still being created since it started), at most
once per job per `EVENTS_PERIOD` (`JobUpdater.memo` keyed by the period), for at most
`MOUNT_PODS` pods. While an Event could still explain the wait, the answer asks to look again
after `EVENTS_PERIOD` (nothing else would wake the job). A list the API refuses counts as no
Event: the condition then says what the pods say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import structlog

from controller.api import TorchrunJob, parse_time
from controller.meta import Obj
from controller.pods import unschedulable as pods_unschedulable
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import EVENTS
from controller.torchrunjob import starting
from controller.torchrunjob.kueue import KueueWorkloads
from controller.torchrunjob.updater import JobUpdater
from controller.torchrunjob.workers import Attempt

log = structlog.get_logger("torchrunjob")

SETTLE = 10.0
EVENTS_PERIOD = 15.0
MOUNT_PODS = 3
EVENTS_PER_LIST = 5


class StartEvidence:
    """Gathers `starting.Evidence` for a live attempt whose workers are not all running."""

    def __init__(self, client: RESTClient, kueue: KueueWorkloads) -> None:
        self.client = client
        self.kueue = kueue

    def gather(
        self, job: TorchrunJob, attempt: Attempt, updater: JobUpdater, now: datetime
    ) -> tuple[starting.Evidence, float | None]:
        """The evidence, and the seconds after which Events should be read again (None: the
        cache's changes will bring the job back)."""
        pods, worker = attempt.pods, attempt.job
        kueue = self.kueue.hold(job, attempt.queue, worker)
        growth = None if kueue else self.kueue.held_growth(job, attempt.queue, worker)
        unschedulable = pods_unschedulable(pods)
        evidence = starting.Evidence(pods=pods, unschedulable=unschedulable, kueue=kueue, kueue_growth=growth)
        if kueue or unschedulable:  # a held growth leaves the other workers to explain
            return evidence, None
        # what an Event could explain, and how long ago it began (a Job's missing pods since the
        # Job was made; a pod still being created since the kubelet took it)
        ages = [_age((p.get("status") or {}).get("startTime"), now) for p in pods if starting.creating(p)]
        short = _short_of_pods(worker, pods, attempt.topology.nodes)
        if short:
            ages.append(_age((worker.get("metadata") or {}).get("creationTimestamp"), now))
        if not ages:
            return evidence, None
        if max(ages) < SETTLE:
            return evidence, SETTLE - max(ages)  # too soon to ask: come back when it is not
        creating = sorted(
            (
                p
                for p in pods
                if starting.creating(p) and _age((p.get("status") or {}).get("startTime"), now) >= SETTLE
            ),
            key=lambda p: p["metadata"]["name"],
        )[:MOUNT_PODS]
        uids = tuple(str(p["metadata"]["uid"]) for p in creating)
        version = (worker["metadata"]["uid"], int(now.timestamp() // EVENTS_PERIOD), short, uids)
        failed_create, mounts = updater.memo(
            "start_events", version, lambda: self._read(job.namespace, worker, creating, short)
        )
        evidence = starting.Evidence(pods=pods, failed_create=failed_create, mounts=mounts)
        return evidence, EVENTS_PERIOD

    def _read(
        self, namespace: str, worker: Obj, creating: Sequence[Obj], short: bool
    ) -> tuple[str | None, dict[str, str]]:
        failed_create = None
        if short:
            uid = worker["metadata"]["uid"]
            events = self._events(namespace, f"involvedObject.uid={uid},reason={starting.CREATE_EVENT}")
            failed_create = starting.create_failure(worker, events)
        found: list[Mapping[str, Any]] = []
        for pod in creating:
            found += self._events(namespace, f"involvedObject.uid={pod['metadata']['uid']},type=Warning")
        return failed_create, starting.mount_failures(creating, found)

    def _events(self, namespace: str, selector: str) -> list[Mapping[str, Any]]:
        try:
            answer = self.client.list(EVENTS, namespace, field_selector=selector, limit=EVENTS_PER_LIST)
        except ApiError as exc:
            log.info("events not read", namespace=namespace, selector=selector, reason=exc.reason)
            return []
        return list(answer.get("items") or [])


def _age(timestamp: object, now: datetime) -> float:
    """Seconds since `timestamp` (0 without one: not known to have waited)."""
    return (now - parse_time(timestamp)).total_seconds() if isinstance(timestamp, str) else 0.0


def _short_of_pods(worker: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], nodes: int) -> bool:
    """The worker Job, not suspended, has fewer live pods than nodes."""
    if (worker.get("spec") or {}).get("suspend"):
        return False
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return len(live) < nodes
