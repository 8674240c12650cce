"""Pure status logic: what the worker Job and its pods say, and the phase the conditions imply.

Conditions are the truth; `phase` is their summary, in this order of precedence: Failed,
Succeeded, Suspended, Running, Syncing (workspace not ready yet but being prepared), Pending.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.api import (
    Condition,
    ConditionStatus,
    JobConditionType,
    JobPhase,
    TorchrunJob,
    TorchrunJobStatus,
    WorkerCounts,
    find_condition,
    is_true,
    set_condition,
    stored_conditions,
    to_json,
)
from controller.api.reasons import Reason, Severity, severity_of
from controller.cache import thaw
from controller.meta import controller_of
from controller.pods import disruption, is_live, is_ready
from controller.progress.eta import while_running
from controller.torchrunjob import goodput
from controller.torchrunjob.manifests.worker import CONTAINER
from controller.torchrunjob.steps import Decision, Observed

# Job failure reasons that come from a FailJob rule of our podFailurePolicy: permanent exit codes
PERMANENT_FAILURE_REASONS = frozenset({"PodFailurePolicy"})


def phase_of(conditions: Sequence[Condition]) -> JobPhase:
    if is_true(conditions, JobConditionType.FAILED):
        return JobPhase.FAILED
    if is_true(conditions, JobConditionType.SUCCEEDED):
        return JobPhase.SUCCEEDED
    if is_true(conditions, JobConditionType.SUSPENDED):
        return JobPhase.SUSPENDED
    if is_true(conditions, JobConditionType.RUNNING):
        return JobPhase.RUNNING
    ws = find_condition(conditions, JobConditionType.WORKSPACE_READY)
    if (
        ws is not None
        and not is_true(conditions, JobConditionType.WORKSPACE_READY)
        and ws.reason == Reason.SYNCING
    ):
        return JobPhase.SYNCING
    return JobPhase.PENDING


def worker_counts(
    worker_job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]] | None = None
) -> WorkerCounts:
    """The attempt's workers by state. With `pods` (the cached pods the worker Job controls),
    `active` and `ready` are counted from them — the pods themselves, the moment the cache has
    them, not the Job's status, which kube-controller-manager writes later (many seconds later
    when its client is busy) — as the Job controller counts them: not finished, not being
    deleted; ready with the `Ready` condition True. `succeeded` and `failed` are the Job's (its
    finalizer-tracked counts survive the pods)."""
    st = (worker_job or {}).get("status") or {}
    if pods is None:
        active, ready = int(st.get("active") or 0), int(st.get("ready") or 0)
    else:
        live = [p for p in pods if is_live(p)]
        active, ready = len(live), sum(1 for p in live if is_ready(p))
    return WorkerCounts(
        active=active,
        ready=ready,
        succeeded=int(st.get("succeeded") or 0),
        failed=int(st.get("failed") or 0),
    )


@dataclass(frozen=True)
class Outcome:
    """How the worker Job ended: `succeeded` or failed, with the Job's reason and message."""

    succeeded: bool
    reason: str
    message: str

    @property
    def permanent(self) -> bool:
        return not self.succeeded and self.reason in PERMANENT_FAILURE_REASONS


def worker_outcome(worker_job: Mapping[str, Any] | None) -> Outcome | None:
    """The terminal condition of the worker Job, if it has one."""
    for cond in ((worker_job or {}).get("status") or {}).get("conditions") or ():
        if cond.get("status") != "True":
            continue
        if cond.get("type") in ("Complete", "SuccessCriteriaMet"):
            return Outcome(True, cond.get("reason") or "Completed", cond.get("message") or "")
        if cond.get("type") in ("Failed", "FailureTarget"):
            return Outcome(False, cond.get("reason") or "Failed", cond.get("message") or "")
    return None


def retriable_failures(pods: Iterable[Mapping[str, Any]], worker_uid: str, codes: Collection[int]) -> int:
    """Failed pods of this worker Job (by controller reference) whose torchrun container exited
    with one of `codes` — the failures podFailurePolicy's Ignore rule does not count. A disrupted
    pod is not one: the policy's first rule ignores it as a disruption whatever its exit code (a
    pod stopped on a lost node or by an eviction exits 143), so neither do we."""
    if not codes:
        return 0
    count = 0
    for pod in pods:
        ref = controller_of(pod)
        if ref is None or ref.get("uid") != worker_uid or (pod.get("status") or {}).get("phase") != "Failed":
            continue
        if disruption(pod) is not None:
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or ():
            code = ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
            if cs.get("name") == CONTAINER and code in codes:
                count += 1
                break
    return count


def changed_conditions(old: Sequence[Condition], new: Sequence[Condition]) -> list[Condition]:
    """Conditions whose status or reason differs from before."""
    out = []
    for cond in new:
        prev = find_condition(old, cond.type)
        if prev is None or prev.status != cond.status or prev.reason != cond.reason:
            out.append(cond)
    return out


@dataclass(frozen=True)
class TransitionEvent:
    warning: bool
    reason: str
    message: str


def transition_events(old: Sequence[Condition], new: Sequence[Condition]) -> list[TransitionEvent]:
    """The Events the move from `old` to `new` conditions is worth (`api/reasons.py` says which):
    a Warning for a condition that moved to a warning reason — or a Failed condition that became
    True — and a Normal one for a condition that became True with a normal reason. One Event per
    reason, with the message of the condition that became True when two share it. `Admitted`
    on a job's first pass is no Event (the condition says it, and every job would have one); a
    job admitted after it waited (its queue, a name) gets one."""
    events: dict[str, TransitionEvent] = {}
    moved = changed_conditions(old, new)
    for cond in sorted(moved, key=lambda c: c.status is not ConditionStatus.TRUE):
        severity = severity_of(cond.reason)
        became_true = cond.status is ConditionStatus.TRUE
        failed = cond.type == JobConditionType.FAILED and became_true
        warn = severity is Severity.WARNING or failed
        if cond.reason in events or severity is Severity.QUIET or not (warn or became_true):
            continue
        if cond.type == JobConditionType.ADMITTED and became_true and find_condition(old, cond.type) is None:
            continue
        events[cond.reason] = TransitionEvent(warn, cond.reason, cond.message)
    return list(events.values())


class StatusUpdate:
    """The status one reconcile is building: conditions set so far, and the timers it asks for.

    Pure: it only records what the steps returned. `cond` keeps `lastTransitionTime` unless the
    status differs from the stored one (see `set_condition`), however often the pass sets it;
    `timers` are delays in seconds after which the job must be looked at again (TTL, deadline,
    a claim's bind deadline); `requeue` asks for a rate-limited retry (a name conflict); `point`
    is the current attempt's newest step observation, for `fold_goodput`.
    """

    def __init__(self, job: TorchrunJob, now: datetime) -> None:
        self.job = job
        self.now = now
        self.status: TorchrunJobStatus = job.status
        self.timers: list[float] = []
        self.requeue = False
        self.point: goodput.Point | None = None

    def cond(self, type_: str, status: ConditionStatus | bool, reason: str, message: str) -> None:
        conds = set_condition(
            self.status.conditions, type_, status, reason, message, self.job.metadata.generation, self.now
        )
        # Set twice in one pass (Admitted=True by admission, then False on a name conflict), a
        # condition has moved only if it ends where the stored one was not: otherwise every such
        # pass would write a new lastTransitionTime, and its own watch event would cause another pass.
        stored = find_condition(self.job.status.conditions, type_)
        new = find_condition(conds, type_)
        if stored is not None and new is not None and new.status == stored.status:
            kept = dataclasses.replace(new, last_transition_time=stored.last_transition_time)
            conds = tuple(kept if c.type == type_ else c for c in conds)
        self.status = dataclasses.replace(self.status, conditions=conds)

    def record(self, *conditions: Observed) -> None:
        for c in conditions:
            self.cond(c.type, c.status, c.reason, c.message)

    def timer(self, seconds: float | None) -> None:
        if seconds is not None:
            self.timers.append(seconds)

    def decided(self, decision: Decision) -> None:
        """Record what a step decided (`steps.py`): its conditions, changes, timer and retry."""
        self.record(*decision.conditions)
        if decision.changes:
            self.set(**decision.changes)
        self.timer(decision.requeue_after)
        self.requeue = self.requeue or decision.retry

    def set(self, **changes: Any) -> None:
        self.status = dataclasses.replace(self.status, **changes)

    def is_true(self, type_: str) -> bool:
        return is_true(self.status.conditions, type_)

    def routine_only(self) -> bool:
        """The status to write differs from the stored one only in the worker counts and in the
        messages of conditions whose status and reason stay (`3/256 worker pods are running`)."""
        final = self.final()
        stored = self.job.status
        if final == stored:
            return False
        kept = {c.type: c for c in stored.conditions}

        def as_stored(c: Condition) -> Condition:
            old = kept.get(c.type)
            if old is None or (old.status, old.reason) != (c.status, c.reason):
                return c
            return dataclasses.replace(c, message=old.message)

        conditions = tuple(as_stored(c) for c in final.conditions)
        return dataclasses.replace(final, workers=stored.workers, conditions=conditions) == stored

    def fold_goodput(self, now: datetime) -> None:
        """Fold what the pass saw into `status.goodput` (`goodput.fold`) at `now` (to the
        microsecond: the pass's own `now` is whole seconds) — only when the status is to be
        written anyway: the ledger never costs a write of its own."""
        final = self.final()
        if final == self.job.status:
            return
        s = self.status
        newest = s.checkpoint.newest if s.checkpoint is not None else None
        progressing = find_condition(s.conditions, JobConditionType.PROGRESSING)
        seen = goodput.Seen(
            admitted=s.start_time is not None,
            running=final.phase is JobPhase.RUNNING,
            suspended=final.phase is JobPhase.SUSPENDED,
            finished=final.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED),
            restarts=s.restarts + s.disruptions,  # a disruption's new attempt loses its tail too
            stalled=progressing is not None
            and progressing.status is ConditionStatus.FALSE
            and progressing.reason in (Reason.STALLED, Reason.STARTUP_STALLED),
            saved_step=newest.step if newest is not None else None,
            point=self.point,
        )
        self.set(goodput=goodput.fold(s.goodput, seen, now))

    def final(self) -> TorchrunJobStatus:
        """The status to write: phase summarised from the conditions, generation observed, an ETA
        only while the job runs (`eta.while_running`)."""
        phase = phase_of(self.status.conditions)
        return dataclasses.replace(
            self.status,
            phase=phase,
            progress=while_running(self.status.progress, phase is JobPhase.RUNNING),
            observed_generation=self.job.metadata.generation,
        )


def invalid_status(raw: Mapping[str, Any], message: str, now: datetime) -> dict[str, Any]:
    """The status of a job whose spec does not parse: `Admitted=False InvalidSpec`, everything
    else kept, and `lastTransitionTime` kept while the condition does not change (no write on
    every resync)."""
    raw_status = raw.get("status") or {}
    conditions = stored_conditions(raw)
    generation = int(raw["metadata"].get("generation") or 0)
    conditions = set_condition(
        conditions, JobConditionType.ADMITTED, False, "InvalidSpec", message, generation, now
    )
    status: dict[str, Any] = thaw(raw_status)
    status["phase"] = JobPhase.PENDING.value
    status["conditions"] = to_json(conditions)
    return status
