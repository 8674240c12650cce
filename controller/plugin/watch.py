"""Waiting on a job while saying what it waits for, in the job's own words (its conditions).

The controller writes why a job is not moving in its conditions (`Admitted=False QueueNotFound`,
`WorkspaceReady=False ClaimNotBound`, `Running=False Unschedulable` quoting the scheduler);
`waiting_for` reads the first condition that is not True, so the plugin never guesses. `wait`
polls the job (one GET per interval: a short-lived command, no watch to re-establish), prints
each new reason once (`Announcer`: one `waiting: ...` line per change), and returns as soon as
the caller's check says done; a job that ends first ends the wait with its outcome. A check that
knows better than the conditions what it waits for (the hot reload's new workers) answers
`Waiting(reason)`, and that reason is printed instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from controller.api import JobConditionType, JobPhase
from controller.plugin.errors import PluginError
from controller.plugin.kube import Kube
from controller.plugin.objects import JSON, get_job

T = TypeVar("T")
TERMINAL = (JobPhase.SUCCEEDED.value, JobPhase.FAILED.value)
_PROGRESS = (JobConditionType.ADMITTED, JobConditionType.WORKSPACE_READY, JobConditionType.RUNNING)


def condition(job: JSON, ctype: str) -> JSON | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def phase(job: JSON) -> str:
    return str((job.get("status") or {}).get("phase") or JobPhase.PENDING.value)


def waiting_for(job: JSON) -> str:
    """What the job waits for: the first of Admitted, WorkspaceReady, Running that is not True,
    with its reason and message; else its phase."""
    for ctype in _PROGRESS:
        c = condition(job, ctype)
        if c is None:
            return f"{ctype}: not reported by the controller yet" if ctype == _PROGRESS[0] else phase(job)
        if c.get("status") != "True":
            return f"{ctype}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}".rstrip(": ")
    return phase(job)


def held_up(job: JSON) -> str | None:
    """`waiting_for(job)` while one of Admitted, WorkspaceReady, Running is not True; else None."""
    reason = waiting_for(job)
    return None if reason == phase(job) else reason


def outcome(job: JSON) -> tuple[int, str] | None:
    """`(exit code, line)` of a finished job: 0 when it succeeded, 1 with the Failed reason."""
    name = job["metadata"]["name"]
    if phase(job) == JobPhase.SUCCEEDED.value:
        return 0, f"job {name} succeeded"
    if phase(job) == JobPhase.FAILED.value:
        c = condition(job, JobConditionType.FAILED) or {}
        return 1, f"job {name} failed: {c.get('reason', 'Failed')}: {c.get('message', '')}".rstrip(": ")
    return None


@dataclass(frozen=True)
class Waiting:
    """A check's own words for what it still waits for, said instead of the job's conditions."""

    reason: str


class Announcer:
    """Says `waiting: <reason>` when the reason differs from the last one said (one line per
    change); `clear` forgets it, so a reason that comes back after progress is said again."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.last = ""

    def __call__(self, reason: str) -> None:
        if reason != self.last:
            self.say(f"waiting: {reason}")
            self.last = reason

    def clear(self) -> None:
        self.last = ""


def wait(
    kube: Kube,
    name: str,
    done: Callable[[JSON], T | Waiting | None],
    say: Callable[[str], None],
    interval: float = 1.0,
    timeout: float | None = None,
) -> T:
    """Poll job `name` until `done(job)` returns a value, and return it. Says each new reason:
    the `Waiting` that `done` returned, else the job's `waiting_for` line; a job that finishes
    before `done` accepts it raises `PluginError` with the job's outcome; `timeout` seconds
    without success raise `PluginError` too."""
    deadline = None if timeout is None else time.monotonic() + timeout
    announce = Announcer(say)
    while True:
        job = get_job(kube, name)
        value = done(job)
        if value is not None and not isinstance(value, Waiting):
            return value
        ended = outcome(job)
        if ended is not None:
            raise PluginError(ended[1], code=ended[0] or 1)
        reason = value.reason if isinstance(value, Waiting) else waiting_for(job)
        announce(reason)
        if deadline is not None and time.monotonic() > deadline:
            raise PluginError(f"gave up after {timeout:.0f}s; the job is still waiting: {reason}")
        time.sleep(interval)


def pod_ended(pod: JSON) -> str | None:
    """Why a pod that will not run anymore ended (its termination message, reason or phase);
    None while it is pending or running."""
    status = pod.get("status") or {}
    if status.get("phase") not in ("Succeeded", "Failed"):
        return None
    for cs in status.get("containerStatuses") or []:
        term: dict[str, Any] = (cs.get("state") or {}).get("terminated") or {}
        text = str(term.get("message") or "").strip()
        try:
            msg = json.loads(text)
            return f"{msg.get('reason', msg.get('result', ''))}: {msg.get('message', '')}".rstrip(": ")
        except ValueError:
            pass
        if text or term.get("reason"):
            return text or str(term.get("reason"))
    return str(status.get("reason") or status.get("phase"))
