"""`status.checkpoint` and its Events from the worker pods (controller/torchrunjob/checkpoints.py)."""

from __future__ import annotations

import datetime
from typing import Any

from controller.api import CheckpointStatus
from controller.checkpoint import CheckpointReport
from controller.torchrunjob.checkpoints import checkpoint_events, checkpoint_status

WORKER_UID = "w-1"


def pod(index: int, report: str | None, *, uid: str = WORKER_UID, created: str = "2026-11-25T10:00:00Z",
        exit_code: int = 0, container: str = "prepare") -> dict[str, Any]:  # fmt: skip
    terminated: dict[str, Any] = {"exitCode": exit_code}
    if report is not None:
        terminated["message"] = report
    return {
        "metadata": {
            "name": f"j-{index}-{created[-3:-1]}",
            "creationTimestamp": created,
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            "ownerReferences": [{"kind": "Job", "name": "j", "uid": uid, "controller": True}],
        },
        "status": {"initContainerStatuses": [{"name": container, "state": {"terminated": terminated}}]},
    }


REPORT = CheckpointReport(
    root="/ck", attempt=1, latest="/ck/step-8", step=8, time="2026-11-25T09:00:00Z", count=2,
    resumed_from="/ck/step-8",
)  # fmt: skip


def test_rank_0_of_this_worker_job_reports() -> None:
    got = checkpoint_status([pod(1, REPORT.to_json()), pod(0, REPORT.to_json())], WORKER_UID)
    assert got == CheckpointStatus(
        attempt=1, latest="/ck/step-8", step=8, count=2, resumed_from="/ck/step-8",
        time=datetime.datetime(2026, 11, 25, 9, 0, tzinfo=datetime.timezone.utc),
    )  # fmt: skip


def test_other_ranks_other_attempts_failures_and_garbage_are_not_reports() -> None:
    text = REPORT.to_json()
    assert checkpoint_status([pod(1, text)], WORKER_UID) is None
    assert checkpoint_status([pod(0, text, uid="an-earlier-attempt")], WORKER_UID) is None
    assert checkpoint_status([pod(0, text, exit_code=1)], WORKER_UID) is None
    assert checkpoint_status([pod(0, text, container="workspace")], WORKER_UID) is None
    assert checkpoint_status([pod(0, None), pod(0, "not json")], WORKER_UID) is None


def test_the_newest_rank_0_pod_wins() -> None:
    newer = CheckpointReport(root="/ck", attempt=1, latest="/ck/step-9", step=9, resumed_from="/ck/step-9")
    pods = [
        pod(0, REPORT.to_json(), created="2026-11-25T10:00:00Z"),
        pod(0, newer.to_json(), created="2026-11-25T10:05:00Z"),
    ]
    got = checkpoint_status(pods, WORKER_UID)
    assert got is not None and got.resumed_from == "/ck/step-9"


def test_a_resume_is_announced_once_per_attempt_and_problems_warn() -> None:
    first = CheckpointStatus(attempt=1, latest="/ck/step-8", step=8, count=2, resumed_from="/ck/step-8")
    (event,) = checkpoint_events(None, first)
    assert (event.warning, event.reason) == (False, "ResumedFromCheckpoint")
    assert event.message == "attempt 1 resumed from /ck/step-8 (step 8); 2 complete checkpoint(s) kept"
    assert checkpoint_events(first, first) == []
    assert (
        checkpoint_events(
            first,
            CheckpointStatus(attempt=1, latest="/ck/step-8", step=8, count=3, resumed_from="/ck/step-8"),
        )
        == []
    )
    assert checkpoint_events(None, CheckpointStatus(attempt=0)) == []  # started from scratch
    troubled = CheckpointStatus(attempt=2, problems=("/ck/step-9 vanished before the start; not chosen",))
    (warning,) = checkpoint_events(first, troubled)
    assert (warning.warning, warning.reason) == (True, "CheckpointProblem")
