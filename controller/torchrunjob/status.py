"""Pure status logic: what the worker Job and its pods say, and the phase the conditions imply.

Conditions are the truth; `phase` is their summary, in this order of precedence: Failed,
Succeeded, Suspended, Running, Syncing (workspace not ready yet but being prepared), Pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from controller.api import Condition, JobConditionType, JobPhase, WorkerCounts, find_condition, is_true

# Job failure reasons that come from a FailJob rule of our podFailurePolicy: permanent exit codes
PERMANENT_FAILURE_REASONS = frozenset({"PodFailurePolicy"})


def now() -> datetime:
    """Wall-clock now at the API's precision (seconds), so unchanged status compares equal."""
    return datetime.now(timezone.utc).replace(microsecond=0)


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
        and ws.reason == "Syncing"
    ):
        return JobPhase.SYNCING
    return JobPhase.PENDING


def worker_counts(worker_job: Mapping[str, Any] | None) -> WorkerCounts:
    st = (worker_job or {}).get("status") or {}
    return WorkerCounts(
        active=int(st.get("active") or 0),
        ready=int(st.get("ready") or 0),
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


def unschedulable(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """The scheduler's message for the first worker pod it cannot place, if any."""
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or ():
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and (cond.get("reason") == "Unschedulable")
            ):
                return f"pod {pod['metadata']['name']}: {cond.get('message') or 'unschedulable'}"
    return None


def changed_conditions(old: Sequence[Condition], new: Sequence[Condition]) -> list[Condition]:
    """Conditions whose status or reason differs from before (for Events)."""
    out = []
    for cond in new:
        prev = find_condition(old, cond.type)
        if prev is None or prev.status != cond.status or prev.reason != cond.reason:
            out.append(cond)
    return out
