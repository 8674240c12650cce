"""The step protocol of the job reconciler: every ensurer answers `Proceed(value)` or `Wait`.

A step makes one part of a job exist (children, the workspace sync, the managed etcd, the gang,
the worker Job) and says whether the next step may run:
- `Proceed(value)`: done for this pass; `value` is what the next steps need (an object, a state).
- `Wait(condition, requeue_after, retry)`: the job cannot go further now. `condition` is what
  the user sees (e.g. `Admitted=False NameConflict` naming the object), `requeue_after` a timer
  for a state that changes by itself at a known time, `retry` a rate-limited retry for a state
  that no watch event announces (a name freed by someone else, a kind not yet served).
A step never raises for an expected state and never writes the job's status: the reconciler
records what the steps returned and writes the status once, on every path (`controller.py`).
Unexpected errors (the API failing) still raise and are retried with backoff.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeAlias, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Observed:
    """One condition as a step observed it (the status writer keeps its transition time)."""

    type: str
    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class Proceed(Generic[T]):
    value: T


@dataclass(frozen=True)
class Wait:
    condition: Observed | None = None
    requeue_after: float | None = None
    retry: bool = False


Step: TypeAlias = Proceed[T] | Wait
