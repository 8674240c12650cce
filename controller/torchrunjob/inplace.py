"""Restarts in place, the controller's side (docs/design/recovery.md).

For a job that restarts in place (`manifests/inplace.in_place_on`), each worker pod's supervisor
tells its state through its sidecar (`progress/supervisors.py`). `InPlace.failure` reads the
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
A restart in place says so in the Running condition (`RestartedInPlace`, an Event), which the next
pass sets back once the workers run. Permanent exit codes never reach here: the supervisor ends its
pod with one and the worker Job's podFailurePolicy fails the job, as without it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from controller.api import JobConditionType as C
from controller.api import TorchrunJob, TorchrunJobStatus
from controller.api.reasons import Reason
from controller.progress.supervisors import SupervisorStates, Told
from controller.torchrunjob.lifecycle import count_restart
from controller.torchrunjob.manifests.inplace import in_place_on
from controller.torchrunjob.manifests.progress import ReporterSettings
from controller.torchrunjob.status import Outcome
from controller.torchrunjob.steps import Decision, Observed


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


def restart(
    failure: Failure,
    status: TorchrunJobStatus,
    *,
    limit: int,
    retriable_codes: Collection[int],
    retriable_cap: int,
    retriable_failures: int,
) -> Decision | None:
    """The in-place restart for `failure` (module doc), or None when none is left."""
    generation = status.in_place_generation + 1
    if failure.exit_code in retriable_codes and retriable_failures < retriable_cap:
        changes: dict[str, object] = {
            "in_place_generation": generation,
            "retriable_failures": retriable_failures + 1,
        }
        counted = f"retriable failure {retriable_failures + 1} of {retriable_cap}"
    elif status.restarts < limit:
        changes = {
            "in_place_generation": generation,
            "restarts": status.restarts + 1,
            "in_place_restarts": status.in_place_restarts + 1,
            "restarts_by_reason": count_restart(status.restarts_by_reason, str(Reason.WORKERS_FAILED)),
        }
        counted = f"restart {status.restarts + 1} of {limit}"
    else:
        return None
    message = f"{counted}, in place (generation {generation}), after: {failure.describe()}"
    return Decision((Observed(C.RUNNING, True, Reason.RESTARTED_IN_PLACE, message),), changes, stop=True)


class InPlace:
    """The supervisors' states the endpoint keeps, read for a job's current attempt."""

    def __init__(self, supervisors: SupervisorStates | None, reporter: ReporterSettings) -> None:
        self.supervisors, self.reporter = supervisors, reporter

    def failure(self, job: TorchrunJob, attempt_uid: str, status: TorchrunJobStatus) -> Failure | None:
        """The failure to answer for `job`'s attempt (module doc); None for a job that does not
        restart in place."""
        if self.supervisors is None or not in_place_on(job, self.reporter):
            return None
        return failure_of(self.supervisors.view(job.key, attempt_uid), status.in_place_generation)

    def forget(self, key: str) -> None:
        if self.supervisors is not None:
            self.supervisors.forget(key)
