"""Restarts in place, the controller's side (docs/design/recovery.md).

For a job that restarts in place (`manifests/inplace.in_place_on`), each worker pod's supervisor
tells its state through its sidecar (`progress/supervisors.py`). `InPlace.decide` reads the
current attempt's states: the ranks whose torchrun failed in the generation the status names
(`status.inPlaceGeneration`) — a failure of an older generation was answered already, so each is
counted once, across leader failovers too (the generation is in the status; a new leader hears the
failed states again from the sidecars, which repeat them while they wait).

`restart(failure, ...)` is the pure decision, one row of a table:
- an exit code in `retriableExitCodes` while `status.retriableFailures` is under
  `maxRetriableFailures`: the next generation, counted in `retriableFailures` (as a retriable pod
  failure is without the supervisor), not in `restarts`;
- any other code while restarts remain (`maxRestarts` capped by `--restart-limit`): the next
  generation, counted once in `restarts`, `inPlaceRestarts` and `restartsByReason[WorkersFailed]`
  in the same status write;
- none left: None — the caller ends the attempt as for a failed worker Job
  (`lifecycle.attempt_ended`: the job fails), and the supervisors, answered `final`, end their pods.
`rejoin`: a rank whose pod was replaced in the current generation (a lost node's pod, recreated by
the worker Job) makes the next generation, not counted — the new pod could not join the closed
rendezvous, the survivors restart into a new one with it. The replacement is known by the pod UID
the leader heard before, or, after a leader failover, from the status alone (`newcomers`).
`restart_stalled` does the same for `onStall: Restart` (`Stalled`, `StartupStalled`): the hung
workers restart in their pods, counted in `restarts` by that reason. Each restart in place also
writes `status.inPlaceRestartTime`; the stall and startup clocks start again when every rank runs
the new generation (`restarted_at`, read by `progress.py`), so neither the restart's own start nor
the kill grace of a rank hung past SIGTERM is taken for a stall. `InPlace.running` raises
`status.inPlaceRunningGeneration` and dates it (`inPlaceRunningTime`).
A restart in place says so in the Running condition (`RestartedInPlace`, an Event), which the next
pass sets back once the workers run. Permanent exit codes never reach here: the supervisor ends its
pod with one and the worker Job's podFailurePolicy fails the job, as without it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from controller.api import JobConditionType as C
from controller.api import TorchrunJob, TorchrunJobStatus, parse_time
from controller.api.reasons import Reason
from controller.meta import Obj
from controller.progress.supervisors import SupervisorStates, Told
from controller.torchrunjob.lifecycle import count_restart
from controller.torchrunjob.manifests.inplace import KILL_GRACE_SECONDS, in_place_on
from controller.torchrunjob.manifests.progress import ReporterSettings
from controller.torchrunjob.status import Outcome
from controller.torchrunjob.steps import Decision, Observed
from controller.torchrunjob.workers import Attempt


@dataclass(frozen=True)
class Failure:
    """The ranks whose torchrun failed in generation `generation`, and the lowest rank's code."""

    generation: int
    ranks: tuple[int, ...]
    exit_code: int

    def describe(self) -> str:
        ranks = ", ".join(map(str, self.ranks))
        return f"torchrun exited {self.exit_code} on node rank {ranks} (generation {self.generation})"

    def outcome(self) -> Outcome:
        """The attempt's end when no restart in place is left."""
        return Outcome(False, Reason.WORKERS_FAILED, self.describe())


def failure_of(states: Mapping[int, Told], generation: int) -> Failure | None:
    """The failure of generation `generation` the states tell, or None."""
    failed = sorted(
        (rank, told.state.exit_code or 1)
        for rank, told in states.items()
        if told.state.state == "failed" and told.state.generation == generation
    )
    if not failed:
        return None
    return Failure(generation, tuple(rank for rank, _ in failed), failed[0][1])


def running_generation(states: Mapping[int, Told], nodes: int) -> int | None:
    """The generation every node rank 0..nodes-1 runs (the lowest; `running` or `succeeded`), or
    None while a rank has told no such state."""
    generations = []
    for rank in range(nodes):
        told = states.get(rank)
        if told is None or told.state.state not in ("running", "succeeded"):
            return None
        generations.append(told.state.generation)
    return min(generations, default=None)


def restarted_at(status: TorchrunJobStatus) -> datetime | None:
    """Where the stall and startup clocks start again after the last generation named in place
    (None: none was): when every rank ran it (`inPlaceRunningTime`, once
    `inPlaceRunningGeneration` reached `inPlaceGeneration`), else `KILL_GRACE_SECONDS` after it was
    named — by then every supervisor started it, unless its rank hangs before torchrun starts, and
    that is a stall to catch. Never before it was named."""
    named = status.in_place_restart_time
    if named is None:
        return None
    ran = status.in_place_running_time
    if status.in_place_running_generation == status.in_place_generation and ran is not None and ran >= named:
        return ran
    return named + timedelta(seconds=KILL_GRACE_SECONDS)


def newcomers(states: Mapping[int, Told], status: TorchrunJobStatus, pods: Sequence[Obj]) -> list[int]:
    """The ranks whose supervisor waits for its first word although every rank was running the
    current generation (`status.inPlaceRunningGeneration` reached `inPlaceGeneration`) and whose
    pod (`pods`: the attempt's, by the UID the rank told from) was created since
    (`inPlaceRunningTime`, to the second the API dates a pod in): a supervisor tells `waiting` only
    before it starts anything, so such a rank's pod came after the rendezvous closed — a
    replacement. Read from the status and the pods, this holds across a leader failover, where
    the memory of the old pod (`SupervisorStates.replaced`) is gone. A pod that ran the generation
    and says `waiting` again (its program can write the supervisor's state file) is not one: it
    cannot restart its job uncounted. A pod created in the very second of `inPlaceRunningTime`
    counts as new: the API cannot order the two, and a real pod's supervisor tells `running`
    seconds after its pod is created (image, container, torchrun), so only a replacement lands
    there. A pod not yet in the cache waits for the pass its event brings; a status without
    `inPlaceRunningTime` (written before it existed) trusts the word."""
    if status.in_place_running_generation != status.in_place_generation:
        return []
    waiting = {rank: told.pod for rank, told in states.items() if told.state.state == "waiting"}
    ran = status.in_place_running_time
    if not waiting or ran is None:
        return sorted(waiting)
    since = ran.replace(microsecond=0)
    new = {
        meta.get("uid")
        for pod in pods
        if isinstance(made := (meta := pod["metadata"]).get("creationTimestamp"), str)
        and parse_time(made) >= since
    }
    return sorted(rank for rank, uid in waiting.items() if uid in new)


def rejoin(
    replaced: Mapping[int, int], waiting: Collection[int], status: TorchrunJobStatus, now: datetime
) -> Decision | None:
    """The next generation when a rank's pod was replaced while the current one ran (`replaced`:
    rank → the generation its old pod was in; `waiting`: `newcomers`): the new pod cannot join a
    rendezvous that closed, so every rank restarts into a new one. Not counted as a restart (the
    pod's loss is the node's, as for the recreate path); None when no rank was replaced in the
    current generation."""
    ranks = sorted(
        {rank for rank, generation in replaced.items() if generation == status.in_place_generation}
        | set(waiting)
    )
    if not ranks:
        return None
    cause = f"the pod of node rank {', '.join(map(str, ranks))} was replaced"
    return _next_generation(status, {}, "a new rendezvous for every rank", cause, now)


def _counted(status: TorchrunJobStatus, limit: int, reason: str) -> dict[str, object] | None:
    """A restart counted in `restarts` (with `inPlaceRestarts` and `restartsByReason[reason]`), or
    None when none is left."""
    if status.restarts >= limit:
        return None
    return {
        "restarts": status.restarts + 1,
        "in_place_restarts": status.in_place_restarts + 1,
        "restarts_by_reason": count_restart(status.restarts_by_reason, reason),
    }


def _next_generation(
    status: TorchrunJobStatus, changes: dict[str, object], counted: str, cause: str, now: datetime
) -> Decision:
    generation = status.in_place_generation + 1
    message = f"{counted}, in place (generation {generation}), after: {cause}"
    changes = {**changes, "in_place_generation": generation, "in_place_restart_time": now}
    return Decision((Observed(C.RUNNING, True, Reason.RESTARTED_IN_PLACE, message),), changes, stop=True)


def restart(
    failure: Failure,
    status: TorchrunJobStatus,
    *,
    limit: int,
    retriable_codes: Collection[int],
    retriable_cap: int,
    retriable_failures: int,
    now: datetime,
) -> Decision | None:
    """The in-place restart for `failure` (module doc), or None when none is left."""
    changes: dict[str, object] | None
    if failure.exit_code in retriable_codes and retriable_failures < retriable_cap:
        counted = f"retriable failure {retriable_failures + 1} of {retriable_cap}"
        changes = {"retriable_failures": retriable_failures + 1}
    else:
        counted = f"restart {status.restarts + 1} of {limit}"
        changes = _counted(status, limit, str(Reason.WORKERS_FAILED))
    if changes is None:
        return None
    return _next_generation(status, changes, counted, failure.describe(), now)


def restart_stalled(
    stalled: Outcome, status: TorchrunJobStatus, *, limit: int, now: datetime
) -> Decision | None:
    """`onStall: Restart` in place: a `Stalled` or `StartupStalled` attempt's workers restart in
    their pods, counted in `restarts` by that reason; None when no restart is left (the caller
    ends the attempt, which fails the job and deletes the hung workers)."""
    changes = _counted(status, limit, str(stalled.reason))
    if changes is None:
        return None
    counted = f"restart {status.restarts + 1} of {limit}"
    return _next_generation(status, changes, counted, f"{stalled.reason}: {stalled.message}", now)


class InPlace:
    """The supervisors' states the endpoint keeps, read for a job's current attempt."""

    def __init__(self, supervisors: SupervisorStates | None, reporter: ReporterSettings) -> None:
        self.supervisors, self.reporter = supervisors, reporter

    def on(self, job: TorchrunJob) -> bool:
        """`job` restarts in place (its spec asks, and the controller has an endpoint)."""
        return self.supervisors is not None and in_place_on(job, self.reporter)

    def decide(
        self,
        job: TorchrunJob,
        attempt: Attempt,
        status: TorchrunJobStatus,
        limit: int,
        retriable_failures: int,
        capped: Outcome | None,
        stalled: Outcome | None,
        now: datetime,
    ) -> Decision | Outcome | None:
        """What ends or restarts a live attempt: for a job that restarts in place, a told failure
        restarts it (`restart`), else a stall does (`restart_stalled`) — a `Decision`; otherwise the
        `Outcome` that ends it, as for any job: `capped` (the retriable-failure cap), a told failure
        with no restart left, `stalled` (onStall Restart); None while it runs on."""
        if not self.on(job):
            return capped or stalled
        assert self.supervisors is not None
        states = self.supervisors.view(job.key, attempt.job["metadata"]["uid"])
        failure = failure_of(states, status.in_place_generation)
        if failure is not None:
            fp = job.spec.failure_policy
            restarted = restart(
                failure,
                status,
                limit=limit,
                retriable_codes=fp.retriable_exit_codes,
                retriable_cap=fp.max_retriable_failures,
                retriable_failures=retriable_failures,
                now=now,
            )
            return restarted or capped or failure.outcome()
        replaced = self.supervisors.replaced(job.key, attempt.job["metadata"]["uid"])
        waiting = newcomers(states, status, attempt.pods)
        if capped is None and (rejoined := rejoin(replaced, waiting, status, now)) is not None:
            return rejoined
        if capped is None and stalled is not None:
            return restart_stalled(stalled, status, limit=limit, now=now) or stalled
        return capped or stalled

    def running(
        self, job: TorchrunJob, attempt: Attempt, status: TorchrunJobStatus, now: datetime
    ) -> Decision:
        """`status.inPlaceRunningGeneration` raised to `running_generation` of the states, when
        that is higher (never lowered in an attempt: a restart's ranks pass through `failed`),
        with `inPlaceRunningTime` = `now` in the same write."""
        assert self.supervisors is not None
        states = self.supervisors.view(job.key, attempt.job["metadata"]["uid"])
        running = running_generation(states, attempt.topology.nodes)
        have = status.in_place_running_generation
        if running is None or (have is not None and running <= have):
            return Decision()
        return Decision(changes={"in_place_running_generation": running, "in_place_running_time": now})

    def forget(self, key: str) -> None:
        if self.supervisors is not None:
            self.supervisors.forget(key)
