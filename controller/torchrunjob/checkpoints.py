"""`status.checkpoint` from what rank 0's `prepare` init container reported (pure; docs/checkpoints.md).

`checkpoint_status(pods, worker_uid)` reads the pods of the current worker Job (by controller
reference, so a previous attempt's pods never count) at node rank 0 (their completion index), the
newest first, and answers the first whose `prepare` container terminated with exit code 0 and a
readable report (`controller.checkpoint.report`) — as a `CheckpointStatus`; None when no such pod
has started yet (the caller keeps what the status said). `checkpoint_events(old, new)` are the
Events a new status deserves: `ResumedFromCheckpoint` (Normal) the first time an attempt's status
says what it resumed from, `CheckpointProblem` (Warning) when its problems are new.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.api import CheckpointStatus, parse_time
from controller.api.reasons import Reason
from controller.checkpoint import CheckpointReport, parse_report
from controller.meta import is_controlled_by
from controller.pods import COMPLETION_INDEX_ANNOTATION
from controller.torchrunjob.manifests.tools import PREPARE_CONTAINER

MAX_PROBLEMS = 16


def _report_of(pod: Mapping[str, Any]) -> CheckpointReport | None:
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or ():
        terminated = (cs.get("state") or {}).get("terminated") or {}
        if cs.get("name") == PREPARE_CONTAINER and terminated.get("exitCode") == 0:
            return parse_report(terminated.get("message"))
    return None


def _status_of(report: CheckpointReport) -> CheckpointStatus:
    try:
        when = parse_time(report.time) if report.time else None
    except ValueError:
        when = None
    return CheckpointStatus(
        attempt=report.attempt,
        latest=report.latest,
        step=report.step,
        time=when,
        count=report.count,
        resumed_from=report.resumed_from,
        pruned=report.pruned,
        downloaded=report.downloaded,
        mirrored=report.mirrored,
        problems=report.problems[:MAX_PROBLEMS],
    )


def checkpoint_status(pods: Iterable[Mapping[str, Any]], worker_uid: str) -> CheckpointStatus | None:
    """What the newest rank-0 pod of this worker Job reported (module doc)."""
    rank0 = [
        p
        for p in pods
        if is_controlled_by(p, worker_uid)
        and (p["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION) == "0"
    ]
    rank0.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""), reverse=True)
    for pod in rank0:
        report = _report_of(pod)
        if report is not None:
            return _status_of(report)
    return None


@dataclass(frozen=True)
class CheckpointEvent:
    warning: bool
    reason: str
    message: str


def checkpoint_events(old: CheckpointStatus | None, new: CheckpointStatus | None) -> list[CheckpointEvent]:
    """The Events a change of `status.checkpoint` from `old` to `new` deserves (module doc)."""
    if new is None or new == old:
        return []
    events = []
    if new.resumed_from and (
        old is None or (old.attempt, old.resumed_from) != (new.attempt, new.resumed_from)
    ):
        step = f" (step {new.step})" if new.step is not None else ""
        message = (
            f"attempt {new.attempt} resumed from {new.resumed_from}{step}; "
            f"{new.count} complete checkpoint(s) kept"
        )
        events.append(CheckpointEvent(False, Reason.RESUMED_FROM_CHECKPOINT, message))
    if new.problems and (old is None or old.problems != new.problems):
        events.append(CheckpointEvent(True, Reason.CHECKPOINT_PROBLEM, "; ".join(new.problems)[:1024]))
    return events
