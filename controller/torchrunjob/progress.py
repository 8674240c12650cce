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
A job that never reported in this attempt is left alone: no condition, no timer, no stall.
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
from controller.api.progress import OnStall, Progress, effective
from controller.cache import Lister
from controller.meta import Obj, is_controlled_by
from controller.progress.stall import RankState, decide
from controller.progress.store import ProgressStore, SavedAt
from controller.progress.summary import progress_of
from controller.torchrunjob import status as st
from controller.torchrunjob.manifests.progress import ReporterSettings
from controller.torchrunjob.reasons import Reason

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
        restarts = p.status.restarts  # an in-place restart keeps the attempt: the rate starts again
        view = self.store.view(job.key, restarts) if self.store is not None else None
        if view is None or view.job_uid != job.metadata.uid or view.attempt != worker_job["metadata"]["uid"]:
            return None
        policy = effective(job.spec.progress, queue.spec.progress)
        ranks = [
            RankState(r, rep.record.step, rep.changed_at, rep.received_at)
            for r, rep in sorted(view.ranks.items())
        ]
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

    def forget(self, key: str) -> None:
        """The job is gone: its reports and publication time go."""
        with self._lock:
            self._published.pop(key, None)
        if self.store is not None:
            self.store.forget(key)


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
