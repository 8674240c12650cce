"""The progress step of a running attempt: reports → `status.progress`, `Progressing`, a stall.

`ProgressStep.observe` reads the leader's reports of the job's current attempt (the store keeps
only reports from the pods of the worker Job it is given; `controller.progress.store`) and:
- sets `status.progress` when it differs from the stored one, but at most once per `period` per
  job (a held-back change comes back by a timer, never by another report: `store.settle`), so
  the API server sees at most one progress write per job per period however often ranks report;
- sets `Progressing`: True (`Reporting`, its message naming the published step; left as it is
  while a change is held back), False (`Stalled`: `progress.stall.decide` — no new record from
  any rank for the effective `stallTimeoutSeconds`, counted from the newest start of the
  attempt's pods when one started since: a hot reload is not a stall — while reports still
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
begins its rendezvous); before that nothing is decided and the pods' own events bring the job
back. Until the timeout falls due a timer is set (no report will come to enqueue the job); then
`Progressing=False StartupStalled` (a Warning) naming the silent ranks, and with `onStall: Restart`
the attempt ends as for `Stalled`. A step published since the start (`status.progress.updateTime`)
counts, so a leader that took over before hearing the ranks' next report does not call a job that
stepped stalled.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from datetime import datetime

from controller.api import (
    JOB_LABEL,
    CheckpointStatus,
    ConditionStatus,
    NewestCheckpoint,
    TorchrunJob,
    TorchrunQueue,
    find_condition,
    parse_time,
)
from controller.api import JobConditionType as C
from controller.api.progress import EffectivePolicy, OnStall, Progress, effective
from controller.api.reasons import Reason
from controller.cache import Lister
from controller.meta import Obj, is_controlled_by
from controller.pods import COMPLETION_INDEX_ANNOTATION
from controller.progress.stall import RankState, Startup, decide, starting
from controller.progress.store import JobView, ProgressStore, SavedAt
from controller.progress.summary import progress_of
from controller.torchrunjob import status as st
from controller.torchrunjob.manifests.progress import ReporterSettings
from controller.torchrunjob.manifests.worker import CONTAINER

DEFAULT_PERIOD = 30.0


@dataclass(frozen=True)
class ProgressSettings:
    """The leader's reports (None: no endpoint, nothing reported), `--progress-period`, and what
    the reporters are told (`--progress-url`, the CA to verify the endpoint with)."""

    store: ProgressStore | None = None
    period: float = DEFAULT_PERIOD
    reporter: ReporterSettings = field(default_factory=ReporterSettings)


class ProgressStep:
    def __init__(self, settings: ProgressSettings, pods: Lister | None = None) -> None:
        self.store = settings.store
        self.period = settings.period
        self.pods = pods
        self._lock = threading.Lock()  # guards _published: one pass per key, many keys at once
        self._published: dict[str, datetime] = {}  # when each job's progress was last set

    def observe(
        self, job: TorchrunJob, queue: TorchrunQueue, worker_job: Obj, p: st.StatusUpdate, final: bool = False
    ) -> st.Outcome | None:
        """The module docstring's step for the attempt of `worker_job`; `final`: the attempt ended
        (its last record is shown whatever the period — the status is written anyway — and
        nothing stalls any more)."""
        if self.store is None:
            return None  # no endpoint: nothing can report
        policy = effective(job.spec.progress, queue.spec.progress)
        restarts = p.status.restarts  # an in-place restart keeps the attempt: the rate starts again
        view = self.store.view(job.key, restarts)
        if view is not None and (
            view.job_uid != job.metadata.uid or view.attempt != worker_job["metadata"]["uid"]
        ):
            view = None  # an earlier attempt's reports
        ranks = [
            RankState(r, rep.record.step, rep.changed_at, rep.received_at)
            for r, rep in sorted((view.ranks if view is not None else {}).items())
        ]
        outcome = self.reports(job, worker_job, view, ranks, policy, p, final) if view is not None else None
        startup = None if final else self.startup(job, worker_job, ranks, policy, p)
        if startup is None:
            return outcome
        if not startup.stalled:
            p.timer(startup.recheck_after)
            return outcome
        message = startup.message()
        p.cond(C.PROGRESSING, False, Reason.STARTUP_STALLED, message)
        if policy.on_stall is OnStall.RESTART:
            return st.Outcome(False, Reason.STARTUP_STALLED, message)
        return None

    def reports(
        self,
        job: TorchrunJob,
        worker_job: Obj,
        view: JobView,
        ranks: list[RankState],
        policy: EffectivePolicy,
        p: st.StatusUpdate,
        final: bool,
    ) -> st.Outcome | None:
        """What the attempt's reports say: `status.progress`, `Progressing`, a stall."""
        timeout = policy.stall_timeout_seconds
        verdict = decide(ranks, timeout, p.now, self.newest_start(job, worker_job), ended=final)
        desired = progress_of(view)
        published = self.publish(job.key, desired, p, final)
        if view.saved is not None:
            show_newest_checkpoint(view.saved, p)
        stored = find_condition(p.status.conditions, C.PROGRESSING)
        if verdict.lost:
            p.cond(
                C.PROGRESSING, ConditionStatus.UNKNOWN, Reason.REPORTING_LOST, verdict.message(ranks, timeout)
            )
        elif verdict.stalled:
            p.cond(C.PROGRESSING, False, Reason.STALLED, verdict.message(ranks, timeout))
        elif published or stored is None or stored.status is not ConditionStatus.TRUE:
            p.cond(C.PROGRESSING, True, Reason.REPORTING, reporting_message(p.status.progress or desired))
        p.timer(verdict.recheck_after)
        assert self.store is not None
        if not self.store.settle(job.key, view.version, awaiting=verdict.awaiting) and not final:
            p.timer(self.period)  # reports arrived during this pass: no report will enqueue the job
        if verdict.stalled and policy.on_stall is OnStall.RESTART:
            return st.Outcome(False, Reason.STALLED, verdict.message(ranks, timeout))
        return None

    def startup(
        self,
        job: TorchrunJob,
        worker_job: Obj,
        ranks: list[RankState],
        policy: EffectivePolicy,
        p: st.StatusUpdate,
    ) -> Startup | None:
        """The startup check of the module docstring (None: it does not apply, or is over)."""
        timeout = startup_timeout(policy, p.status.progress)
        if timeout is None:
            return None
        nodes = (worker_job.get("spec") or {}).get("parallelism")
        started = self.workers_started(job, worker_job, nodes) if isinstance(nodes, int) else None
        shown = p.status.progress
        stepped_at = shown.update_time if shown is not None and shown.step is not None else None
        return starting(ranks, nodes or 0, timeout, p.now, started, stepped_at)

    def publish(self, key: str, desired: Progress | None, p: st.StatusUpdate, final: bool = False) -> bool:
        """Set `desired` unless it is stored already or (unless `final`) the last one was set less
        than a period ago (then a timer); True when the status shows `desired`."""
        if desired is None or desired == p.status.progress:
            return desired is not None
        with self._lock:
            last = self._published.get(key)
            wait = 0.0 if last is None or final else self.period - (p.now - last).total_seconds()
            if wait > 0:
                p.timer(wait)
                return False
            self._published[key] = p.now
        p.set(progress=desired)
        return True

    def newest_start(self, job: TorchrunJob, worker_job: Obj) -> datetime | None:
        """When the newest live pod of `worker_job` started (None: none has, or no cache)."""
        if self.pods is None:
            return None
        starts = [
            parse_time(start)
            for pod in self.pods.list(job.namespace, {JOB_LABEL: job.name})
            if is_controlled_by(pod, worker_job["metadata"]["uid"])
            and not pod["metadata"].get("deletionTimestamp")
            and (start := (pod.get("status") or {}).get("startTime"))
        ]
        return max(starts, default=None)

    def workers_started(self, job: TorchrunJob, worker_job: Obj, nodes: int) -> datetime | None:
        """When the last of `worker_job`'s `nodes` ranks started its training container: the
        newest start of the live pods' running ones, once every rank 0..nodes-1 has one (None
        before that, or with no cache)."""
        if self.pods is None or nodes < 1:
            return None
        starts: dict[str, datetime] = {}
        for pod in self.pods.list(job.namespace, {JOB_LABEL: job.name}):
            rank = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION)
            start = training_start(pod)
            if (
                is_controlled_by(pod, worker_job["metadata"]["uid"])
                and not pod["metadata"].get("deletionTimestamp")
                and rank is not None
                and start is not None
            ):
                starts[rank] = max(start, starts.get(rank, start))
        ranks = [starts.get(str(rank)) for rank in range(nodes)]
        return None if None in ranks else max(r for r in ranks if r is not None)

    def forget(self, key: str) -> None:
        """The job is gone: its reports and publication time go."""
        with self._lock:
            self._published.pop(key, None)
        if self.store is not None:
            self.store.forget(key)


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


def show_newest_checkpoint(saved: SavedAt, p: st.StatusUpdate) -> None:
    """`status.checkpoint.newest` says `saved` (to the second, as the API keeps times)."""
    current = p.status.checkpoint or CheckpointStatus(attempt=p.status.restarts)
    newest = NewestCheckpoint(saved.name, saved.step, saved.time.replace(microsecond=0))
    if current.newest != newest:
        p.set(checkpoint=dataclasses.replace(current, newest=newest))


def reporting_message(progress: Progress | None) -> str:
    """Progressing=True's message: the step shown in the status and the rank that reported it."""
    if progress is None:
        return "progress reported"
    step = "no step" if progress.step is None else f"step {progress.step}"
    total = f" of {progress.total_steps}" if progress.total_steps else ""
    return f"{step}{total} reported by rank {progress.rank}"
