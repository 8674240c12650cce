"""The progress step of a running attempt: reports → `status.progress`, `Progressing`, a stall.

`ProgressStep.observe` reads the leader's reports of the job's current attempt (the store keeps
only reports from the pods of the worker Job it is given; `controller.progress.store`) and the
attempt's pods (`Attempt.pods`: it lists none itself), and answers as a step (`steps.py`): what
the pass records — it writes nothing into the pass's status itself. Its answer:
- sets `status.progress` when it differs from the stored one, but at most once per `period` per
  job (a held-back change comes back by a timer, never by another report: `store.settle`), so
  the API server sees at most one progress write per job per period however often ranks report;
- sets `Progressing`: True (`Reporting`, its message naming the published step; left as it is
  while a change is held back), False (`Stalled`: `progress.stall.decide` — no new record from
  any rank for the effective `stallTimeoutSeconds`, counted from the newest start of the
  attempt's pods or the last restart in place when one came since (`inplace.restarted_at`: when
  every rank ran the generation it named): a hot reload or a restart is not a stall — while reports still
  arrive to say so) or Unknown (`ReportingLost`: no report from any rank for the lost window,
  `stall.lost_after`: an outage of the reports is not a stall, and nothing is done about it),
  and a timer for when the verdict would change; when the verdict waits on the next report
  (a stall to confirm, reports to resume) the store enqueues the job on any report (`awaiting`);
- sets `status.checkpoint.newest` to the newest complete checkpoint a report told (rank 0's
  sidecar scans the volume: `progress/saved.py`), written with the pass's status like the rest;
- once the attempt ended (`final`), shows its last record at once (that pass writes the status
  anyway) and neither stalls nor loses reports any more;
- answers the attempt's `Outcome` when it stalled and `onStall` is `Restart`: the reconciler
  ends the attempt like a failure (`lifecycle.attempt_ended`: a whole-job restart counted
  against `failurePolicy.maxRestarts`, reason `Stalled` in its message; else `Failed`).
A job that never reported in this attempt is never `Stalled` nor `ReportingLost`; whether it is
`StartupStalled` is the startup check's (`progress.stall.starting`), which runs while the attempt
has not ended for a job with a startup timeout (`startup_timeout`): the effective
`startupTimeoutSeconds`, else — for a job known to report (`known_to_report`: `status.progress`
shows a step, so it reported one in an earlier attempt or before a reload; kept in the API, a new
leader knows it) — its `stallTimeoutSeconds`; else none, and a job whose program never reports is
never called stalled. Its clock starts at the workers' start (`workers_started`: once a live pod
of the worker Job runs its training container for every node rank of `spec.parallelism`, the
newest of those containers' `startedAt` — after image pulls and init containers, when torchrun
begins its rendezvous — or the last restart in place, when later: `inplace.restarted_at`);
before that nothing is decided and the pods' own events bring the job back. Until the timeout
falls due a timer is set (no report will come to enqueue the job); then `Progressing=False
StartupStalled` (a Warning) naming the silent ranks, and with `onStall: Restart` the attempt ends
as for `Stalled`. A step published since the start (`status.progress.updateTime`) counts, so a
leader that took over before hearing the ranks' next report does not call a job that stepped
stalled.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from controller.api import (
    CheckpointStatus,
    ConditionStatus,
    NewestCheckpoint,
    TorchrunJob,
    TorchrunJobStatus,
    TorchrunQueue,
    find_condition,
    parse_time,
)
from controller.api import JobConditionType as C
from controller.api.progress import EffectivePolicy, OnStall, Progress, effective
from controller.api.reasons import Reason
from controller.meta import Obj
from controller.pods import COMPLETION_INDEX_ANNOTATION
from controller.progress.stall import RankState, Startup, decide, starting
from controller.progress.store import JobView, ProgressStore, SavedAt
from controller.progress.summary import progress_of
from controller.progress.supervisors import SupervisorStates
from controller.torchrunjob import status as st
from controller.torchrunjob.goodput import Point
from controller.torchrunjob.inplace import restarted_at
from controller.torchrunjob.manifests.progress import ReporterSettings
from controller.torchrunjob.manifests.worker import CONTAINER
from controller.torchrunjob.steps import PROCEED, Decision, Observed, Proceed

DEFAULT_PERIOD = 30.0


@dataclass(frozen=True)
class ProgressSettings:
    """The leader's reports (None: no endpoint, nothing reported), `--progress-period`, and what
    the reporters are told (`--progress-url`, the CA to verify the endpoint with)."""

    store: ProgressStore | None = None
    period: float = DEFAULT_PERIOD
    reporter: ReporterSettings = field(default_factory=ReporterSettings)
    supervisors: SupervisorStates | None = None  # the in-place supervisors' states (inplace.py)


class ProgressStep:
    def __init__(self, settings: ProgressSettings) -> None:
        self.store = settings.store
        self.period = settings.period
        self._lock = threading.Lock()  # guards _published: one pass per key, many keys at once
        self._published: dict[str, datetime] = {}  # when each job's progress was last set

    def observe(
        self,
        job: TorchrunJob,
        queue: TorchrunQueue,
        worker_job: Obj,
        pods: Sequence[Obj],
        status: TorchrunJobStatus,
        now: datetime,
        final: bool = False,
    ) -> Proceed[st.Outcome | None]:
        """The module docstring's step for the attempt of `worker_job`, whose pods are `pods`, on
        the job's `status` as the pass has it so far: what to record (conditions, progress,
        checkpoint, a timer), and the attempt's `Outcome` when it stalled for a restart. `final`:
        the attempt ended (its last record is shown whatever the period — the status is written
        anyway — and nothing stalls any more)."""
        if self.store is None:
            return Proceed(None)  # no endpoint: nothing can report
        policy = effective(job.spec.progress, queue.spec.progress)
        restarts = status.restarts  # an in-place restart keeps the attempt: the rate starts again
        view = self.store.view(job.key, restarts)
        if view is not None and (
            view.job_uid != job.metadata.uid or view.attempt != worker_job["metadata"]["uid"]
        ):
            view = None  # an earlier attempt's reports
        ranks = [
            RankState(r, rep.record.step, rep.changed_at, rep.received_at)
            for r, rep in sorted((view.ranks if view is not None else {}).items())
        ]
        reported: Proceed[st.Outcome | None] = Proceed(None)
        if view is not None:
            reported = self.reports(job, pods, view, ranks, policy, status, now, final)
        noted, outcome = reported.decision, reported.value
        shown = noted.changes.get("progress", status.progress)
        startup = None if final else self.startup(worker_job, pods, ranks, policy, shown, now, status)
        if startup is None:
            return reported
        if not startup.stalled:
            return Proceed(outcome, noted.then(Decision(requeue_after=startup.recheck_after)))
        message = startup.message()
        stalled = noted.then(Decision((Observed(C.PROGRESSING, False, Reason.STARTUP_STALLED, message),)))
        if policy.on_stall is OnStall.RESTART:
            return Proceed(st.Outcome(False, Reason.STARTUP_STALLED, message), stalled)
        return Proceed(None, stalled)

    def reports(
        self,
        job: TorchrunJob,
        pods: Sequence[Obj],
        view: JobView,
        ranks: list[RankState],
        policy: EffectivePolicy,
        status: TorchrunJobStatus,
        now: datetime,
        final: bool,
    ) -> Proceed[st.Outcome | None]:
        """What the attempt's reports say: `status.progress`, `Progressing`, a stall."""
        timeout = policy.stall_timeout_seconds
        verdict = decide(ranks, timeout, now, later(newest_start(pods), restarted_at(status)), ended=final)
        desired = progress_of(view)
        noted = self.publish(job.key, desired, status.progress, now, final)
        shown = noted.changes.get("progress", status.progress)
        if view.saved is not None:
            noted = noted.then(show_newest_checkpoint(view.saved, status))
        stored = find_condition(status.conditions, C.PROGRESSING)
        published = desired is not None and shown == desired
        condition = None
        if verdict.lost:
            message = verdict.message(ranks, timeout)
            condition = Observed(C.PROGRESSING, ConditionStatus.UNKNOWN, Reason.REPORTING_LOST, message)
        elif verdict.stalled:
            condition = Observed(C.PROGRESSING, False, Reason.STALLED, verdict.message(ranks, timeout))
        elif published or stored is None or stored.status is not ConditionStatus.TRUE:
            condition = Observed(C.PROGRESSING, True, Reason.REPORTING, reporting_message(shown or desired))
        noted = noted.then(
            Decision(() if condition is None else (condition,), requeue_after=verdict.recheck_after)
        )
        assert self.store is not None
        if not self.store.settle(job.key, view.version, awaiting=verdict.awaiting) and not final:
            # reports arrived during this pass: no report will enqueue the job
            noted = noted.then(Decision(requeue_after=self.period))
        if verdict.stalled and policy.on_stall is OnStall.RESTART:
            return Proceed(st.Outcome(False, Reason.STALLED, verdict.message(ranks, timeout)), noted)
        return Proceed(None, noted)

    def startup(
        self,
        worker_job: Obj,
        pods: Sequence[Obj],
        ranks: list[RankState],
        policy: EffectivePolicy,
        shown: Progress | None,
        now: datetime,
        status: TorchrunJobStatus,
    ) -> Startup | None:
        """The startup check of the module docstring (None: it does not apply, or is over);
        `shown`: the status.progress this pass leaves."""
        timeout = startup_timeout(policy, shown)
        if timeout is None:
            return None
        nodes = (worker_job.get("spec") or {}).get("parallelism")
        started = workers_started(pods, nodes) if isinstance(nodes, int) else None
        if started is not None:  # a restart in place starts the workers again (inplace.py)
            started = later(started, restarted_at(status))
        stepped_at = shown.update_time if shown is not None and shown.step is not None else None
        return starting(ranks, nodes or 0, timeout, now, started, stepped_at)

    def point(self, job: TorchrunJob, worker_job: Obj, restarts: int) -> Point | None:
        """The attempt's highest step reported and when a rank first reached it (the reporters'
        own dating: `store.record`), for the goodput ledger (None: no step reported)."""
        view = None if self.store is None else self.store.view(job.key, restarts)
        if view is None or view.job_uid != job.metadata.uid or view.attempt != worker_job["metadata"]["uid"]:
            return None
        steps = [
            (rep.record.step, rep.changed_at) for rep in view.ranks.values() if rep.record.step is not None
        ]
        if not steps:
            return None
        top = max(step for step, _ in steps)
        return Point(top, min(at for step, at in steps if step == top))

    def publish(
        self, key: str, desired: Progress | None, shown: Progress | None, now: datetime, final: bool = False
    ) -> Decision:
        """Set `desired` unless the status shows it already (`shown`) or (unless `final`) the last
        one was set less than a period ago (then a timer)."""
        if desired is None or desired == shown:
            return PROCEED
        with self._lock:
            last = self._published.get(key)
            wait = 0.0 if last is None or final else self.period - (now - last).total_seconds()
            if wait > 0:
                return Decision(requeue_after=wait)
            self._published[key] = now
        return Decision(changes={"progress": desired})

    def forget(self, key: str) -> None:
        """The job is gone: its reports and publication time go."""
        with self._lock:
            self._published.pop(key, None)
        if self.store is not None:
            self.store.forget(key)


def later(a: datetime | None, b: datetime | None) -> datetime | None:
    """The later of two times that may be missing."""
    return max((t for t in (a, b) if t is not None), default=None)


def newest_start(pods: Sequence[Obj]) -> datetime | None:
    """When the newest live one of the attempt's `pods` started (None: none has)."""
    starts = [
        parse_time(start)
        for pod in pods
        if not pod["metadata"].get("deletionTimestamp")
        and (start := (pod.get("status") or {}).get("startTime"))
    ]
    return max(starts, default=None)


def workers_started(pods: Sequence[Obj], nodes: int) -> datetime | None:
    """When the last of the attempt's `nodes` ranks started its training container: the newest
    start of the live `pods`' running ones, once every rank 0..nodes-1 has one (None before)."""
    if nodes < 1:
        return None
    starts: dict[str, datetime] = {}
    for pod in pods:
        rank = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION)
        start = training_start(pod)
        if not pod["metadata"].get("deletionTimestamp") and rank is not None and start is not None:
            starts[rank] = max(start, starts.get(rank, start))
    ranks = [starts.get(str(rank)) for rank in range(nodes)]
    return None if None in ranks else max(r for r in ranks if r is not None)


def training_start(pod: Obj) -> datetime | None:
    """When `pod`'s training container started running (None: it does not run)."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        started = ((c.get("state") or {}).get("running") or {}).get("startedAt")
        if c.get("name") == CONTAINER and started:
            return parse_time(started)
    return None


def startup_timeout(policy: EffectivePolicy, shown: Progress | None) -> int | None:
    """The startup timeout in effect: `startupTimeoutSeconds`, else `stallTimeoutSeconds` for a job
    known to report, else none."""
    if policy.startup_timeout_seconds is not None:
        return policy.startup_timeout_seconds
    return policy.stall_timeout_seconds if known_to_report(shown) else None


def known_to_report(shown: Progress | None) -> bool:
    """The job's program reports training steps: `status.progress` shows a step (an earlier
    attempt, or this one before a reload, reported one; the API keeps it across leader failovers,
    and a new attempt does not clear it — until that attempt's own record replaces it). A record
    without a step is not enough: a program that reports only metrics would never end a startup.
    A job running [frameworks]' hooks (issue 33) will be known to report from its first start: not
    built yet, those hooks have no switch to read here."""
    return shown is not None and shown.step is not None


def show_newest_checkpoint(saved: SavedAt, status: TorchrunJobStatus) -> Decision:
    """`status.checkpoint.newest` says `saved` (to the second, as the API keeps times)."""
    current = status.checkpoint or CheckpointStatus(attempt=status.attempt)
    newest = NewestCheckpoint(saved.name, saved.step, saved.time.replace(microsecond=0))
    if current.newest == newest:
        return PROCEED
    return Decision(changes={"checkpoint": dataclasses.replace(current, newest=newest)})


def reporting_message(progress: Progress | None) -> str:
    """Progressing=True's message: the step shown in the status and the rank that reported it."""
    if progress is None:
        return "progress reported"
    step = "no step" if progress.step is None else f"step {progress.step}"
    total = f" of {progress.total_steps}" if progress.total_steps else ""
    return f"{step}{total} reported by rank {progress.rank}"
