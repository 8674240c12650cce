"""The step protocol of the job reconciler: every step answers `Proceed(value, decision)` or a
`Decision` that ends the pass.

A step makes one part of a job exist or observes it (admission, the workspace claims and
generation, the managed etcd, the gang, the worker Job, the attempt's state) and answers with one
type, `Decision`, of what the pass records and does:
- `conditions`: what the user sees (e.g. `Admitted=False NameConflict` naming the object);
  `changes`: status fields to set; `actions`: what to carry out (`Action`: deletions);
- `requeue_after`: a timer for a state that changes by itself at a known time; `retry`: a
  rate-limited retry for a state that no watch event announces (a name freed by someone else, a
  kind not yet served);
- `stop`: the pass ends here (the job waits, or is over).
`Proceed(value, decision)`: the pass goes on; `value` is what the next steps need (an object, a
state) and `decision` what the step noted on the way (`Admitted=True`, a timer). A `Decision`
answered in place of a `Proceed` ends the pass (`wait(...)` builds one that only waits).
A step never raises for an expected state and never writes the job's status: the reconciler
records what the steps answered and writes the status once, on every path (`controller.py`).
Unexpected errors (the API failing) still raise and are retried with backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeAlias, TypeVar

from controller.api import ConditionStatus

T = TypeVar("T")


@dataclass(frozen=True)
class Observed:
    """One condition as a step observed it (the status writer keeps its transition time)."""

    type: str
    status: ConditionStatus | bool
    reason: str
    message: str


class Action(Enum):
    DELETE_WORKERS = "DeleteWorkers"  # the worker Job (its pods go with it)
    REMOVE_ETCD = "RemoveEtcd"  # the managed etcd pod
    REMOVE_ETCD_SERVICE = "RemoveEtcdService"
    DELETE_SERVICE = "DeleteService"  # the headless Service
    STOP_SYNC = "StopSync"  # sync pods still at work (the ones that ended stay, for their logs)
    CLEAN_WORKSPACE = "CleanWorkspace"  # sync pods and the workspace claim (checkpoints stay)
    DELETE_JOB = "DeleteJob"  # the TorchrunJob itself


@dataclass(frozen=True)
class Decision:
    """What to record and do (see the module doc). `stop`: the pass ends here."""

    conditions: tuple[Observed, ...] = ()
    changes: Mapping[str, Any] = field(default_factory=dict)
    actions: tuple[Action, ...] = ()
    requeue_after: float | None = None
    retry: bool = False
    stop: bool = False

    def then(self, other: Decision) -> Decision:
        """Both decisions, `other`'s after this one's (its changes win; the sooner timer)."""
        timers = [t for t in (self.requeue_after, other.requeue_after) if t is not None]
        return Decision(
            self.conditions + other.conditions,
            {**self.changes, **other.changes},
            self.actions + other.actions,
            min(timers) if timers else None,
            self.retry or other.retry,
            self.stop or other.stop,
        )


PROCEED = Decision()


def wait(
    condition: Observed | None = None, *, requeue_after: float | None = None, retry: bool = False
) -> Decision:
    """The job cannot go further now: `condition` says why (a timer or a retry brings it back)."""
    conditions = () if condition is None else (condition,)
    return Decision(conditions, requeue_after=requeue_after, retry=retry, stop=True)


@dataclass(frozen=True)
class Proceed(Generic[T]):
    value: T
    decision: Decision = PROCEED


Step: TypeAlias = Proceed[T] | Decision
