"""The ETA tells the truth (issue 31 item 3): none for a job that is not running, and a rate that
never mixes two runs — it starts again when the step goes back and when `status.restarts` changes
(an in-place restart keeps the worker Job, so the store's attempt stays). Pure parts
(controller/progress/eta.py), the store that feeds the rate, the status the controller writes, and
`kubectl torchrun status`'s line."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from controller.api import ConditionStatus, JobConditionType, JobPhase, TorchrunJob
from controller.api.progress import Progress
from controller.plugin.progressbar import progress_line
from controller.progress.eta import StepHistory, eta, while_running
from controller.progress.record import Record
from controller.progress.store import ProgressStore
from controller.progress.summary import progress_of
from controller.torchrunjob.status import StatusUpdate

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
SECONDS_PER_STEP = 1.1
TOTAL = 60


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def seconds_left(history: StepHistory, step: int, when: float) -> float:
    end = eta(step, TOTAL, history.rate(), at(when))
    assert end is not None
    return (end - at(when)).total_seconds()


# -- the rate: one run at a time -------------------------------------------------------------------


def test_a_restart_that_went_back_from_25_to_21_estimates_step_36_of_60_at_the_new_runs_rate() -> None:
    """The issue's job: ~1.1 s a step, crashed after step 25, resumed from step-20 a minute later.
    At step 36 of 60, 24 steps are left: about 26 s, not `ETA 8s`."""
    h = StepHistory()
    for step in range(26):
        h.add(step * SECONDS_PER_STEP, step)
    resumed = 25 * SECONDS_PER_STEP + 60
    for i, step in enumerate(range(21, 37)):
        h.add(resumed + i * SECONDS_PER_STEP, step)
    now = resumed + 15 * SECONDS_PER_STEP
    assert h.rate() == pytest.approx(1 / SECONDS_PER_STEP)
    assert seconds_left(h, 36, now) == pytest.approx(24 * SECONDS_PER_STEP)


def test_a_restart_that_never_shows_a_step_going_back_starts_the_rate_again_by_the_restart_count() -> None:
    """Reports are sampled: the last step seen before an in-place restart can be 20 and the first
    after it 22, so only `status.restarts` tells the runs apart. Mixed, the minute between the runs
    counts as training (or the redone steps as none) and the estimate is wrong."""
    mixed, fresh = StepHistory(), StepHistory()
    fresh.restarted(0)
    for history in (mixed, fresh):
        for step in range(0, 21, 5):
            history.add(step * SECONDS_PER_STEP, step)
    fresh.restarted(1)
    assert fresh.rate() is None  # one run's samples only: none yet
    resumed = 25 * SECONDS_PER_STEP + 60
    for history in (mixed, fresh):
        for i, step in enumerate(range(22, 37, 2)):
            history.add(resumed + 2 * i * SECONDS_PER_STEP, step)
    now = resumed + 14 * SECONDS_PER_STEP
    assert seconds_left(fresh, 36, now) == pytest.approx(24 * SECONDS_PER_STEP)
    assert seconds_left(mixed, 36, now) != pytest.approx(24 * SECONDS_PER_STEP, rel=0.2)


def test_the_restart_count_first_told_or_told_again_keeps_the_history() -> None:
    h = StepHistory()
    h.add(0, 0)
    h.add(10, 10)
    h.restarted(3)  # the first count told: these samples are of the run it counts
    h.restarted(3)
    assert h.rate() == 1.0
    told = StepHistory(restarts=3)  # a rank first heard of after the count was known
    told.add(0, 0)
    told.add(10, 10)
    told.restarted(4)
    assert told.rate() is None


def test_the_store_starts_the_rate_again_when_the_jobs_restart_count_changes() -> None:
    store = ProgressStore()

    def report(step: int, when: float, rank: int = 0) -> None:
        store.report(
            "ns/job", job_uid="job", attempt="worker-job", rank=rank,
            record=Record(step=step, total_steps=TOTAL), seconds_since_change=0.0, now=at(when),
        )  # fmt: skip

    for step in range(0, 21, 5):
        report(step, step * SECONDS_PER_STEP)
    view = store.view("ns/job", restarts=0)
    assert view is not None and view.rate == pytest.approx(1 / SECONDS_PER_STEP)
    resumed = 25 * SECONDS_PER_STEP + 60
    report(22, resumed)  # the same attempt (in place), a step above the last one seen
    view = store.view("ns/job", restarts=1)
    assert view is not None and view.rate is None
    report(24, resumed + 2 * SECONDS_PER_STEP)
    report(26, resumed + 4 * SECONDS_PER_STEP)
    view = store.view("ns/job", restarts=1)
    assert view is not None and view.rate == pytest.approx(1 / SECONDS_PER_STEP)
    report(10, resumed + 3, rank=1)  # a rank first heard of now takes the count it is under
    report(12, resumed + 3 + 2 * SECONDS_PER_STEP, rank=1)
    assert store.view("ns/job", restarts=1) is not None
    progress = progress_of(store.view("ns/job") or pytest.fail("no view"))
    assert progress is not None and progress.eta is not None


# -- no ETA for a job that is not running -----------------------------------------------------------


def test_only_a_running_job_keeps_an_eta() -> None:
    shown = Progress(step=24, total_steps=60, percent=40, eta=at(40))
    assert while_running(shown, True) == shown
    assert while_running(shown, False) == Progress(step=24, total_steps=60, percent=40)
    assert while_running(None, False) is None


def running_job() -> TorchrunJob:
    """A job whose stored status shows an estimate, as the pass before it stopped running wrote."""
    return TorchrunJob.from_json(
        {
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": {"jobQueue": "q", "numNodes": 2, "command": "python train.py"},
            "status": {
                "phase": "Running",
                "progress": {"step": 24, "totalSteps": 60, "eta": "2026-11-25T12:00:40Z"},
            },
        }
    )


@pytest.mark.parametrize(
    ("condition", "status", "phase"),
    [
        (JobConditionType.FAILED, True, JobPhase.FAILED),  # the job: failed at 41%
        (JobConditionType.SUCCEEDED, True, JobPhase.SUCCEEDED),
        (JobConditionType.SUSPENDED, True, JobPhase.SUSPENDED),
        (JobConditionType.RUNNING, False, JobPhase.PENDING),  # workers not started (again)
        (JobConditionType.RUNNING, True, JobPhase.RUNNING),
    ],
)
def test_the_status_written_has_an_eta_only_while_running(
    condition: str, status: bool, phase: JobPhase
) -> None:
    p = StatusUpdate(running_job(), at(30))
    p.cond(condition, ConditionStatus.TRUE if status else ConditionStatus.FALSE, "Why", "because")
    final = p.final()
    assert final.phase is phase
    assert final.progress is not None and final.progress.step == 24  # the last step stays
    assert (final.progress.eta is not None) == (phase is JobPhase.RUNNING)


def cli_job(phase: str) -> dict[str, Any]:
    progress = {"step": 24, "totalSteps": 60, "percent": 41, "eta": "2026-11-25T11:59:00Z"}
    return {"metadata": {"name": "j"}, "status": {"phase": phase, "progress": progress}}


@pytest.mark.parametrize("phase", ["Failed", "Succeeded", "Suspended", "Pending", "Syncing"])
def test_kubectl_torchrun_status_shows_no_eta_for_a_job_that_is_not_running(phase: str) -> None:
    """A status written before this fix still holds the failed job's last estimate: no `ETA 0s`."""
    line = progress_line(cli_job(phase), at(0))
    assert line is not None and "41%" in line and "ETA" not in line


def test_kubectl_torchrun_status_shows_the_eta_of_a_running_job() -> None:
    job = cli_job("Running")
    job["status"]["progress"]["eta"] = "2026-11-25T12:00:26Z"
    assert "ETA 26s (12:00Z)" in (progress_line(job, at(0)) or "")
