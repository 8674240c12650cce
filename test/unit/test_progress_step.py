"""The reconciler's progress step: at most one progress change per period, Progressing and its
Stalled reason (only while heartbeats still arrive), ReportingLost when none does (never an
action), a restart only with onStall Restart, nothing for a job that never reported unless it has a
startup timeout (or is known to report), and then StartupStalled when no training step came
within it of the workers' start."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

from jobspecs import job, queue

from controller.api import ConditionStatus, TorchrunJob, find_condition, format_time
from controller.api import JobConditionType as C
from controller.api.progress import Progress
from controller.cache import Indexer, Lister
from controller.meta import is_controlled_by
from controller.progress.record import Record
from controller.progress.store import JobView, ProgressStore
from controller.torchrunjob import lifecycle
from controller.torchrunjob import status as st
from controller.torchrunjob.progress import ProgressSettings, ProgressStep

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WORKER = {"metadata": {"uid": "w-1"}}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def push(
    store: ProgressStore, step: int, now: float, *, rank: int = 0, attempt: str = "w-1", age: float = 0
) -> bool:
    """A report as the endpoint keeps it; `age`: seconds since the record changed (a heartbeat)."""
    return store.report(
        "ns/j",
        job_uid="u-1",
        attempt=attempt,
        rank=rank,
        record=Record(step=step, total_steps=100),
        seconds_since_change=age,
        now=at(now),
    )


class Passes:
    """Passes of the step over one job, each starting from the status the last one computed."""

    def __init__(
        self, j: TorchrunJob, period: float = 30, pods: Lister | None = None, **queue_spec: Any
    ) -> None:
        self.store = ProgressStore()
        self.step = ProgressStep(ProgressSettings(self.store, period))
        self.pods = pods
        self.job, self.queue = j, queue(**queue_spec)
        self.outcome: st.Outcome | None = None
        self.worker: dict[str, Any] = WORKER

    def run(self, now: float, final: bool = False) -> st.StatusUpdate:
        """A pass at `now`, over the attempt's pods as `workers.py` lists them (the worker Job's)."""
        p = st.StatusUpdate(self.job, at(now))
        cached = self.pods.list("ns", {"torchrun-job-name": "j"}) if self.pods is not None else []
        pods = tuple(pod for pod in cached if is_controlled_by(pod, self.worker["metadata"]["uid"]))
        answer = self.step.observe(self.job, self.queue, self.worker, pods, p.status, p.now, final)
        p.decided(answer.decision)
        self.outcome = answer.value
        self.job = dataclasses.replace(self.job, status=p.final())
        return p


def test_a_job_that_never_reported_gets_nothing() -> None:
    passes = Passes(job(progress={"stallTimeoutSeconds": 60, "onStall": "Restart"}))
    p = passes.run(10_000)
    assert p.status.progress is None and p.timers == [] and passes.outcome is None
    assert find_condition(p.status.conditions, C.PROGRESSING) is None


def test_reports_of_another_attempt_are_not_this_attempts() -> None:
    passes = Passes(job(progress={"stallTimeoutSeconds": 60}))
    push(passes.store, 5, 0, attempt="w-0")
    p = passes.run(10_000)
    assert p.status.progress is None and find_condition(p.status.conditions, C.PROGRESSING) is None


def test_progress_changes_at_most_once_per_period() -> None:
    passes = Passes(job(), period=30)
    push(passes.store, 1, 0)
    p = passes.run(0)
    assert p.status.progress is not None and p.status.progress.step == 1
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and (cond.status, cond.reason) == (ConditionStatus.TRUE, "Reporting")
    assert cond.message == "step 1 of 100 reported by rank 0"
    push(passes.store, 2, 10)
    p = passes.run(10)
    assert p.status.progress is not None and p.status.progress.step == 1  # held back
    assert p.timers == [20.0]  # comes back when the period is over (the step's one timer: the sooner)
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and cond.message == "step 1 of 100 reported by rank 0"  # unchanged too
    p = passes.run(30)
    assert p.status.progress is not None and p.status.progress.step == 2
    assert p.status.progress.summary == "2%"


def test_the_last_record_of_an_ended_attempt_is_shown_at_once_and_nothing_stalls() -> None:
    passes = Passes(job(progress={"stallTimeoutSeconds": 60, "onStall": "Restart"}), period=30)
    push(passes.store, 1, 0)
    passes.run(0)
    push(passes.store, 100, 5)
    p = passes.run(10, final=True)  # within the period: held back, but the workers ended
    assert passes.outcome is None
    assert p.status.progress is not None and p.status.progress.step == 100 and p.timers == []
    p = passes.run(500, final=True)  # long silent since: an ended attempt never stalls
    assert passes.outcome is None
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and cond.status is ConditionStatus.TRUE


def test_a_silent_job_stalls_after_the_timeout_with_a_warning_reason_and_no_restart() -> None:
    passes = Passes(job(progress={"stallTimeoutSeconds": 60}))
    push(passes.store, 7, 0)
    p = passes.run(1)
    assert p.timers == [59.0]  # the stall would begin then
    push(passes.store, 7, 60, age=60)  # a heartbeat: reports still arrive, the step does not move
    p = passes.run(60)
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and (cond.status, cond.reason) == (ConditionStatus.FALSE, "Stalled")
    assert "step 7" in cond.message and "silent: rank 0" in cond.message
    assert passes.outcome is None  # onStall None: the condition only
    assert [e.reason for e in st.transition_events((), p.status.conditions) if e.warning] == ["Stalled"]
    push(passes.store, 8, 70)  # progress again
    p = passes.run(70)
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and (cond.status, cond.reason) == (ConditionStatus.TRUE, "Reporting")


def test_reports_that_stop_arriving_are_reporting_lost_never_a_stall_nor_a_restart() -> None:
    """An outage of the endpoint (a certificate, a CA, an overload) silences every rank at once:
    Progressing=Unknown ReportingLost after the lost window, a Warning, nothing restarted; the
    first report after it — even an unchanged heartbeat — brings the job back by itself."""
    passes = Passes(
        job(failurePolicy={"maxRestarts": 3}), progress={"stallTimeoutSeconds": 60, "onStall": "Restart"}
    )
    push(passes.store, 7, 0)
    p = passes.run(0)
    assert p.timers == [60.0]
    p = passes.run(60)  # due, but no heartbeat came: it may be an outage, so not yet
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and cond.status is ConditionStatus.TRUE and passes.outcome is None
    assert p.timers == [36.0]  # when reports would be lost
    p = passes.run(96)
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and (cond.status, cond.reason) == (ConditionStatus.UNKNOWN, "ReportingLost")
    assert "no progress report from any rank for 96s or more" in cond.message
    assert passes.outcome is None and p.timers == []  # no action, no polling: a report comes back
    assert [e.reason for e in st.transition_events((), p.status.conditions) if e.warning] == ["ReportingLost"]
    assert push(passes.store, 9, 200, age=5) is True  # reports resume: the job is enqueued
    p = passes.run(200)
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and (cond.status, cond.reason) == (ConditionStatus.TRUE, "Reporting")
    assert passes.outcome is None


def test_a_heartbeat_after_the_stall_fell_due_confirms_it() -> None:
    passes = Passes(job(progress={"stallTimeoutSeconds": 60}))
    push(passes.store, 7, 0)
    passes.run(60)  # due, unconfirmed: the next report of any kind enqueues the job
    assert push(passes.store, 7, 66, age=66) is True
    p = passes.run(66)
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and (cond.status, cond.reason) == (ConditionStatus.FALSE, "Stalled")
    assert push(passes.store, 7, 99, age=99) is False  # stalled: a heartbeat is no pass


def worker_pod(name: str, started: float, owner: str = "w-1", **meta: Any) -> dict[str, Any]:
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": owner, "controller": True}
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {"torchrun-job-name": "j"},
                     "ownerReferences": [ref], **meta},
        "status": {"startTime": format_time(at(started))},
    }  # fmt: skip


def test_a_worker_pod_started_after_the_last_record_restarts_the_stall_clock() -> None:
    pods = Indexer()
    pods.add(worker_pod("j-0-a", 0))
    pods.add(worker_pod("j-0-b", 100))  # a hot reload's new pod, still loading
    pods.add(worker_pod("j-0-c", 140, deletionTimestamp=format_time(at(141))))  # going: not counted
    pods.add(worker_pod("other", 145, owner="w-0"))  # an earlier attempt's: not counted
    passes = Passes(job(progress={"stallTimeoutSeconds": 60}), pods=Lister(pods))
    push(passes.store, 7, 0)
    push(passes.store, 7, 140, age=140)  # a heartbeat
    p = passes.run(150)
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and cond.status is ConditionStatus.TRUE  # 150 s silent, but loading since 100
    assert 10.0 in p.timers  # 60 s from the start at 100
    push(passes.store, 7, 160, age=160)  # a heartbeat
    p = passes.run(160)
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and cond.reason == "Stalled"


def test_the_queue_default_restarts_a_stalled_job_as_a_failed_attempt() -> None:
    passes = Passes(
        job(failurePolicy={"maxRestarts": 1}), progress={"stallTimeoutSeconds": 60, "onStall": "Restart"}
    )
    push(passes.store, 7, 0)
    push(passes.store, 7, 61, age=61)  # a heartbeat
    passes.run(61)
    outcome = passes.outcome
    assert outcome is not None and outcome.reason == "Stalled" and not outcome.succeeded
    restart = lifecycle.attempt_ended(outcome, restarts=0, limit=1, ttl_seconds=None, now=at(61))
    assert restart.changes["restarts"] == 1
    assert "Stalled" in restart.conditions[0].message
    failed = lifecycle.attempt_ended(outcome, restarts=1, limit=1, ttl_seconds=None, now=at(61))
    assert lifecycle.Action.DELETE_WORKERS in failed.actions  # hung ranks do not end by themselves
    assert failed.conditions[-1].reason == "RestartLimitExceeded"


def test_a_report_during_the_pass_brings_the_job_back_by_a_timer() -> None:
    class Racing(ProgressStore):
        def view(self, key: str, restarts: int | None = None) -> JobView | None:
            seen = super().view(key, restarts)
            push(self, 2, 0.5)  # lands while the pass works: it does not enqueue (unsettled)
            return seen

    passes = Passes(job(), period=30)
    passes.store = passes.step.store = Racing()
    push(passes.store, 1, 0)
    p = passes.run(1)
    assert 30.0 in p.timers  # no report will enqueue the job now: the pass comes back by itself
    assert (
        passes.store.report(
            "ns/j",
            job_uid="u-1",
            attempt="w-1",
            rank=0,
            record=Record(step=3),
            seconds_since_change=0,
            now=at(2),
        )
        is False
    )


# -- startup: no training step since the workers started ------------------------------------

TWO_NODES = {"metadata": {"uid": "w-1"}, "spec": {"parallelism": 2}}


def running_pod(rank: int, started: float | None, owner: str = "w-1", **meta: Any) -> dict[str, Any]:
    """Node `rank`'s worker pod; its training container running since `started` (None: waiting)."""
    pod = worker_pod(f"j-{rank}-{owner}", 0 if started is None else started, owner, **meta)
    pod["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": str(rank)}
    state = (
        {"waiting": {"reason": "ContainerCreating"}}
        if started is None
        else {"running": {"startedAt": format_time(at(started))}}
    )
    pod["status"]["containerStatuses"] = [
        {"name": "progress-reporter", "state": {"running": {"startedAt": format_time(at(0))}}},
        {"name": "torchrun", "state": state},
    ]
    return pod


def starting_passes(*pods: dict[str, Any], **spec: Any) -> Passes:
    """Passes over a two-node job of `spec` whose worker pods are `pods`."""
    cache = Indexer()
    for pod in pods:
        cache.add(pod)
    passes = Passes(job(**spec), pods=Lister(cache))
    passes.worker = TWO_NODES
    return passes


def progressing(p: st.StatusUpdate) -> tuple[ConditionStatus, str, str] | None:
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    return None if cond is None else (cond.status, cond.reason, cond.message)


def reason(p: st.StatusUpdate) -> str | None:
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    return None if cond is None else cond.reason


def test_a_job_that_never_reports_without_a_startup_timeout_is_never_stalled() -> None:
    """Today's behaviour kept: a stall timeout alone says nothing about a job that never reported."""
    passes = starting_passes(
        running_pod(0, 0), running_pod(1, 5), progress={"stallTimeoutSeconds": 60, "onStall": "Restart"}
    )
    for now in (10, 65, 10_000):
        p = passes.run(now)
        assert progressing(p) is None and p.timers == [] and passes.outcome is None


def test_no_step_within_the_startup_timeout_of_the_workers_start_is_startup_stalled() -> None:
    passes = starting_passes(running_pod(0, 0), running_pod(1, 5), progress={"startupTimeoutSeconds": 60})
    p = passes.run(10)
    assert progressing(p) is None and p.timers == [55.0]  # the clock started with the later worker
    p = passes.run(65)
    assert progressing(p) == (
        ConditionStatus.FALSE,
        "StartupStalled",
        "no rank reported a training step within 60s of the workers' start at 2026-01-01T00:00:05Z; "
        "never reported: rank 0, rank 1",
    )
    assert [e.reason for e in st.transition_events((), p.status.conditions) if e.warning] == [
        "StartupStalled"
    ]
    assert passes.outcome is None  # onStall None: the condition only
    push(passes.store, 1, 70)  # the first step, late: progressing
    p = passes.run(70)
    assert progressing(p) == (ConditionStatus.TRUE, "Reporting", "step 1 of 100 reported by rank 0")


def test_the_startup_clock_waits_for_every_worker_to_run() -> None:
    passes = starting_passes(running_pod(0, 0), running_pod(1, None), progress={"startupTimeoutSeconds": 60})
    p = passes.run(10_000)
    assert progressing(p) is None and p.timers == []  # the pod's start enqueues the job, no timer
    passes = starting_passes(
        running_pod(0, 0), running_pod(1, 5, deletionTimestamp=format_time(at(6))),
        progress={"startupTimeoutSeconds": 60},
    )  # fmt: skip
    assert progressing(passes.run(10_000)) is None  # a pod going away is no worker running


def test_a_rank_that_reports_no_step_is_named_apart_from_the_silent_one_and_restarts() -> None:
    """The queue's startup timeout and onStall: rank 0's program writes a record without a step
    (it runs) and hangs before its first step; rank 1 never writes one."""
    passes = starting_passes(
        running_pod(0, 0),
        running_pod(1, 0),
        failurePolicy={"maxRestarts": 1},
    )
    passes.queue = queue(progress={"startupTimeoutSeconds": 60, "onStall": "Restart"})
    passes.store.report(
        "ns/j", job_uid="u-1", attempt="w-1", rank=0, record=Record(total_steps=100),
        seconds_since_change=0, now=at(20),
    )  # fmt: skip
    p = passes.run(60)
    cond = find_condition(p.status.conditions, C.PROGRESSING)
    assert cond is not None and cond.reason == "StartupStalled"
    assert cond.message.endswith("never reported: rank 1; reported no step: rank 0")
    outcome = passes.outcome
    assert outcome is not None and outcome.reason == "StartupStalled" and not outcome.succeeded
    restart = lifecycle.attempt_ended(outcome, restarts=0, limit=1, ttl_seconds=None, now=at(60))
    assert restart.changes["restarts"] == 1 and "StartupStalled" in restart.conditions[0].message
    failed = lifecycle.attempt_ended(outcome, restarts=1, limit=1, ttl_seconds=None, now=at(60))
    assert lifecycle.Action.DELETE_WORKERS in failed.actions  # hung ranks do not end by themselves


def test_a_step_of_one_rank_since_the_start_ends_the_startup() -> None:
    passes = starting_passes(running_pod(0, 0), running_pod(1, 0), progress={"startupTimeoutSeconds": 60})
    push(passes.store, 1, 30, rank=0)  # rank 1 never reports (rank-0-only reporting)
    p = passes.run(100)  # past the startup timeout, before reports would be lost
    assert reason(p) == "Reporting"
    assert passes.outcome is None


def test_a_job_that_reported_before_gets_its_stall_timeout_for_its_startup() -> None:
    """No startupTimeoutSeconds, but status.progress says the program reports (an earlier
    attempt's record, kept in the API across attempts and leader failovers): the stall timeout
    bounds the startup of this attempt, whose pods started after that record."""
    passes = starting_passes(running_pod(0, 100), running_pod(1, 100), progress={"stallTimeoutSeconds": 60})
    earlier = Progress(step=40, update_time=at(50), rank=0)
    passes.job = dataclasses.replace(
        passes.job, status=dataclasses.replace(passes.job.status, progress=earlier)
    )
    p = passes.run(120)
    assert progressing(p) is None and p.timers == [40.0]
    p = passes.run(160)
    assert reason(p) == "StartupStalled"


def test_a_step_shown_since_the_start_is_no_startup_stall_for_a_new_leader() -> None:
    """A leader that took over has no report yet (the ranks' next heartbeat is up to ~33 s away),
    but the status its predecessor wrote shows a step since the workers started."""
    passes = starting_passes(running_pod(0, 100), running_pod(1, 100), progress={"startupTimeoutSeconds": 60})
    shown = Progress(step=3, update_time=at(130), rank=0)
    passes.job = dataclasses.replace(
        passes.job, status=dataclasses.replace(passes.job.status, progress=shown)
    )
    p = passes.run(10_000)
    assert progressing(p) is None and p.timers == [] and passes.outcome is None


def test_a_hot_reloads_new_pods_that_never_step_are_startup_stalled() -> None:
    """The attempt's earlier pods stepped; the reload's pods (started at 100) never do."""
    passes = starting_passes(running_pod(0, 100), running_pod(1, 100), progress={"startupTimeoutSeconds": 60})
    push(passes.store, 40, 90, rank=0)
    push(passes.store, 40, 90, rank=1)
    p = passes.run(120)
    assert 40.0 in p.timers
    p = passes.run(160)
    assert progressing(p) == (
        ConditionStatus.FALSE,
        "StartupStalled",
        "no rank reported a training step within 60s of the workers' start at 2026-01-01T00:01:40Z; "
        "never reported: rank 0, rank 1",
    )


def test_a_program_that_reports_no_step_is_not_known_to_report_steps() -> None:
    """A stall timeout alone and records that never carry a step (metrics only): no startup check,
    so such a job is never StartupStalled (its records moving keep it Reporting)."""
    passes = starting_passes(running_pod(0, 0), running_pod(1, 0), progress={"stallTimeoutSeconds": 60})
    for now in (0, 50, 100):
        passes.store.report(
            "ns/j", job_uid="u-1", attempt="w-1", rank=0, record=Record(metrics={"loss": 2.0 - now / 100}),
            seconds_since_change=0, now=at(now),
        )  # fmt: skip
        p = passes.run(now)
    assert reason(p) == "Reporting" and passes.outcome is None
