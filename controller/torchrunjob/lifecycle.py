"""A job's lifecycle as pure decisions: state in, conditions + status changes + actions out.

Each function answers one question of SPEC §6 from plain values and returns a `Decision` (the
one answer of every step: `steps.py`); the reconciler (`controller.py`) records its conditions
and changes and carries out its actions. No I/O, no clock: `now` is an argument, so every rule is
a row in a table test. `deadline_of` and `finished_of` answer for a job as it stands, as steps.
- `deadline`: `activeDeadlineSeconds` counted from the start (sync included; a suspended job's
  clock is not checked) — a timer until then; past it, the job fails `DeadlineExceeded`.
- `ttl`: `ttlSecondsAfterFinished` after completion the TorchrunJob is deleted; a timer until then.
- `finished`: what a finished job still needs done — its managed etcd pod goes (nothing
  rendezvous any more), a worker Job still running pods goes (a deadline, the retriable cap), a
  sync still at work goes (a deadline that passed while the job waited for its code, or workers
  that ended during a hot reload: nothing will run that code, and an upload's sync pod would
  wait for it up to --upload-timeout), `--autoclean` removes workers, Service, sync pods and
  workspace claim; then its TTL.
- `attempt_ended`: the worker Job ended — success; a permanent exit code fails the job at once;
  a retriable failure restarts the whole job while restarts remain (counted first: the next pass
  deletes the old attempt's Job because its restart annotation no longer matches, so a crash in
  between cannot lose the restart); else the job fails. The retriable-failure cap ends an attempt
  whose Job is still recreating pods, so that Job is deleted.
- `retriable_limit`: pod failures with a retriable exit code beyond the cap end the attempt.
- `suspension`, `running`: the Suspended and Running conditions of a live attempt.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta

from controller.api import JobConditionType as C
from controller.api import TorchrunJob, TorchrunJobStatus
from controller.api.reasons import Reason
from controller.torchrunjob.starting import Blocked
from controller.torchrunjob.status import Outcome
from controller.torchrunjob.steps import PROCEED, Action, Decision, Observed, Proceed, Step


def ttl(seconds: int | None, completion_time: datetime | None, now: datetime) -> Decision:
    """Delete the TorchrunJob `seconds` after it finished (at `now` when it has no completion
    time yet: it finishes in this pass); until then, a timer."""
    if seconds is None:
        return PROCEED
    remaining = ((completion_time or now) + timedelta(seconds=seconds) - now).total_seconds()
    if remaining > 0:
        return Decision(requeue_after=remaining)
    return Decision(actions=(Action.DELETE_JOB,))


def deadline(
    limit: int | None, suspended: bool, start_time: datetime | None, ttl_seconds: int | None, now: datetime
) -> Decision:
    """A timer until `activeDeadlineSeconds` after the start; past it, the job fails and stops."""
    if not limit or suspended or start_time is None:
        return PROCEED
    remaining = (start_time + timedelta(seconds=limit) - now).total_seconds()
    if remaining > 0:
        return Decision(requeue_after=remaining)
    message = f"the job ran longer than activeDeadlineSeconds ({limit}s, counted from its start)"
    over = Decision(
        conditions=(
            Observed(
                C.RUNNING, False, Reason.DEADLINE_EXCEEDED, "the job stopped: activeDeadlineSeconds passed"
            ),
            Observed(C.FAILED, True, Reason.DEADLINE_EXCEEDED, message),
        ),
        changes={"completion_time": now},
        actions=(Action.DELETE_WORKERS,),
        stop=True,
    )
    return over.then(ttl(ttl_seconds, now, now))


def finished(
    *,
    managed_etcd: bool,
    autoclean: bool,
    workers_running: bool,
    ttl_seconds: int | None,
    completion_time: datetime | None,
    now: datetime,
    syncing: bool = False,
) -> Decision:
    """What a finished job (Succeeded or Failed) still needs: see the module doc. `syncing`: a
    sync pod of the job is still at work."""
    actions: list[Action] = []
    if managed_etcd:
        actions.append(Action.REMOVE_ETCD)
        if autoclean:
            actions.append(Action.REMOVE_ETCD_SERVICE)
    if autoclean or workers_running:
        actions.append(Action.DELETE_WORKERS)
    if autoclean:
        actions += [Action.DELETE_SERVICE, Action.CLEAN_WORKSPACE]
    elif syncing:
        actions.append(Action.STOP_SYNC)
    return Decision(actions=tuple(actions), stop=True).then(ttl(ttl_seconds, completion_time, now))


RESTART_REASONS = 32  # status.restartsByReason's maxProperties
OTHER_RESTART_REASON = "Other"


def count_restart(by_reason: Mapping[str, int], reason: str) -> dict[str, int]:
    """`by_reason` with one more restart for `reason` — under `Other` once the map holds as many
    reasons as the schema allows (the Job controller's reasons are a few, but not ours to bound)."""
    counted = dict(by_reason)
    key = reason if reason in counted or len(counted) < RESTART_REASONS - 1 else OTHER_RESTART_REASON
    counted[key] = counted.get(key, 0) + 1
    return counted


def attempt_ended(
    outcome: Outcome,
    *,
    restarts: int,
    limit: int,
    ttl_seconds: int | None,
    now: datetime,
    by_reason: Mapping[str, int] | None = None,
) -> Decision:
    """The worker Job of attempt `restarts` ended with `outcome`; `limit` whole-job restarts are
    allowed in all (the job's `maxRestarts` capped by `--restart-limit`). A restart is counted in
    `restarts` and, by the outcome's reason, in `restarts_by_reason` (`by_reason` so far), in the
    same change."""
    if outcome.succeeded:
        done = Decision(
            conditions=(
                Observed(C.RUNNING, False, Reason.COMPLETED, "the workers finished"),
                Observed(C.SUCCEEDED, True, Reason.SUCCEEDED, f"rank 0 succeeded ({outcome.reason})"),
            ),
            changes={"completion_time": now},
            stop=True,
        )
        return done.then(ttl(ttl_seconds, now, now))
    if not outcome.permanent and restarts < limit:
        message = f"restart {restarts + 1} of {limit} after: {outcome.reason}: {outcome.message}"
        return Decision(
            conditions=(Observed(C.RUNNING, False, Reason.RESTARTING, message),),
            changes={
                "restarts": restarts + 1,
                "restarts_by_reason": count_restart(by_reason or {}, str(outcome.reason)),
                "retriable_failures": 0,
                "in_place_generation": 0,  # a new worker Job: its supervisors start at 0
                "in_place_running_generation": None,
                "in_place_running_time": None,
                "in_place_restart_time": None,  # the new pods' start is the clocks' start
            },
            stop=True,
        )
    if outcome.permanent:
        failed = Observed(
            C.FAILED,
            True,
            Reason.PERMANENT_FAILURE,
            f"a worker exited with a permanent exit code: {outcome.message}",
        )
    else:
        message = f"{outcome.reason}: {outcome.message} (whole-job restarts used: {restarts}/{limit})"
        reason = Reason.RESTART_LIMIT_EXCEEDED if limit else Reason.WORKERS_FAILED
        failed = Observed(C.FAILED, True, reason, message)
    # its Job keeps recreating pods, or its ranks hang
    still_running = outcome.reason in (Reason.RETRIABLE_LIMIT, Reason.STALLED, Reason.STARTUP_STALLED)
    fail = Decision(
        conditions=(Observed(C.RUNNING, False, Reason.FAILED, outcome.message), failed),
        changes={"completion_time": now},
        actions=(Action.DELETE_WORKERS,) if still_running else (),
        stop=True,
    )
    return fail.then(ttl(ttl_seconds, now, now))


def retriable_limit(count: int, cap: int, codes: Collection[int]) -> Outcome | None:
    """The attempt's end once more than `cap` pods failed with a retriable exit code; else None."""
    if count <= cap:
        return None
    message = (
        f"{count} pod failures with a retriable exit code ({', '.join(map(str, codes))}) in this attempt, "
        f"more than failurePolicy.maxRetriableFailures ({cap})"
    )
    return Outcome(False, Reason.RETRIABLE_LIMIT, message)


def suspension(suspend: bool, was_suspended: bool) -> tuple[Observed, ...]:
    """The Suspended (and, while suspended, Running) conditions; `was_suspended`: the job has a
    Suspended condition already (a resume is then worth saying)."""
    if suspend:
        return (
            Observed(
                C.SUSPENDED,
                True,
                Reason.SUSPENDED,
                "spec.suspend is true: workers removed, storage and status kept",
            ),
            Observed(C.RUNNING, False, Reason.SUSPENDED, "the job is suspended"),
        )
    if was_suspended:
        return (Observed(C.SUSPENDED, False, Reason.RESUMED, "spec.suspend is false"),)
    return ()


def running(ready: int, nodes: int, blocked: Blocked | None, growth: str | None = None) -> Observed:
    """The Running condition of a live attempt: every node's worker ready, or why not yet —
    `blocked`'s reason and words (`starting.py`) when something holds a worker back. `growth`:
    Kueue's words for a growth it holds while every other worker runs (`starting.held_growth`),
    which leaves the job running."""
    if ready >= nodes:
        return Observed(
            C.RUNNING, True, Reason.ALL_WORKERS_RUNNING, f"{ready}/{nodes} worker pods are running"
        )
    if growth is not None and blocked is None:
        message = f"{ready}/{nodes} worker pods are running; the growth waits for Kueue: {growth}"
        return Observed(C.RUNNING, True, Reason.GROWTH_WAITING_FOR_ADMISSION, message)
    if blocked is not None:
        return Observed(C.RUNNING, False, blocked.reason, blocked.message)
    return Observed(C.RUNNING, False, Reason.WORKERS_STARTING, f"{ready}/{nodes} worker pods are running")


def deadline_of(job: TorchrunJob, status: TorchrunJobStatus, now: datetime) -> Step[None]:
    """`deadline` for `job` as it stands, as a step: its timer on the way, or the job's end."""
    spec = job.spec
    decided = deadline(
        spec.active_deadline_seconds, spec.suspend, status.start_time, spec.ttl_seconds_after_finished, now
    )
    return decided if decided.stop else Proceed(None, decided)


def finished_of(
    job: TorchrunJob,
    status: TorchrunJobStatus,
    autoclean: bool,
    workers_running: bool,
    syncing: bool,
    now: datetime,
) -> Decision:
    """`finished` for `job` as it stands; `workers_running`: its worker Job has not ended;
    `syncing`: a sync pod of it is still at work."""
    return finished(
        managed_etcd=job.spec.distributed.runs_managed_etcd,
        autoclean=autoclean,
        workers_running=workers_running,
        ttl_seconds=job.spec.ttl_seconds_after_finished,
        completion_time=status.completion_time,
        now=now,
        syncing=syncing,
    )
