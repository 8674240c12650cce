"""Goodput: a job's wall time since admission split into training that advanced for good and
the causes of the rest, folded into the ledger `status.goodput` (`api/goodput.py`). Pure.

`fold(ledger, seen, now)` advances the ledger's clock (`mark`, seconds after `since`) to what
this status write knows, and charges the time in between by what the job was doing (`state`):
- **Scheduling**: admitted, the first attempt's workers not all running yet (phase not Running);
- **Startup**: the first attempt's workers run, no training step reported yet;
- **Restarting**: from a whole-job restart (`status.restarts` grew, or `status.disruptions`: a
  disrupted rank's new attempt) — the time since the old attempt's last step included, unless that
  attempt was `Stalled` (then stalls: `onStall: Restart`) — to the new attempt's first step;
- **Training**: between two step observations (a step and when it changed, from the progress
  reports: `Seen.point`). Of the time from one to the next, `steps × step time` is work — done
  again (**redone**) for steps up to the highest reached before, **good** above it — and the rest
  is **stalls**. The step time is the median of the last `RECENT` intervals' time per step (a
  stall is one slow interval among them, and a report's dating jitter one fast or slow one).
  The work of the segment that ends an attempt's startup is split the same way from the step the
  attempt resumed at (the newest complete checkpoint's when the
  restart came — rank 0's reports say it — else the first step seen less one, else 0 for the
  first attempt): its rest is startup or restart time. Until the step time is known (a job's first
  two observations) that segment is held open.
Suspended time counts for nothing; a finished job's ledger stops (`Done`). A job whose program
never reports a step has no goodput to show (`summary` absent): its time after startup is unknown.

Why points and not pass times: passes come up to a `--progress-period` apart and at any moment
within it, but each step observation carries the time its step changed as the reporter said
(`progress.store`), so a segment's ends are exact and only its split (`steps × step time`)
is estimated; the time after the last observation stays uncharged until the next one — the
fraction covers the job up to its last observation. Fed only on a status write that happens
anyway (`StatusUpdate.fold_goodput`): the ledger costs no write of its own, and a leader that
takes over reads the ledger from the status and goes on from its `mark` (a point it has already
counted is older than the mark and ignored; the reports it has not heard yet arrive again).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from datetime import datetime

from controller.api import Goodput, GoodputSeconds

SCHEDULING, STARTUP, RESTARTING, TRAINING, DONE = "Scheduling", "Startup", "Restarting", "Training", "Done"
CAUSES = ("scheduling", "startup", "restarts", "redone", "stalls")
RECENT = 5  # step-time samples kept: their median is the step time
_WAITING_CAUSE = {SCHEDULING: "scheduling", STARTUP: "startup", RESTARTING: "restarts"}


@dataclass(frozen=True)
class Point:
    """The current attempt's highest step reported and when it changed."""

    step: int
    time: datetime


@dataclass(frozen=True)
class Seen:
    """What the status about to be written says, for the ledger."""

    admitted: bool  # status.startTime is set
    running: bool  # phase Running: every worker of the attempt ready
    suspended: bool
    finished: bool
    restarts: int
    stalled: bool = False  # Progressing=False Stalled or StartupStalled
    saved_step: int | None = None  # status.checkpoint.newest's step
    point: Point | None = None


def fold(ledger: Goodput | None, seen: Seen, now: datetime) -> Goodput | None:
    """The ledger after what `seen` says at `now` (None: the job was never admitted)."""
    if ledger is None or ledger.since is None:
        if not seen.admitted or seen.finished:
            return None
        start = now.replace(microsecond=0)  # the API keeps times to the second
        ledger = Goodput(since=start, mark=_at(start, now), restarts=seen.restarts)
    since = ledger.since
    assert since is not None
    if ledger.state == DONE:
        return ledger
    t = _at(since, now)
    point = seen.point
    if seen.restarts > ledger.restarts:  # a whole-job restart: the old attempt's tail is lost
        if point is not None:  # the pass that ends an attempt sees that attempt's reports
            ledger = _observe(ledger, point.step, _at(since, point.time))
            point = None
        tail = "stalls" if seen.stalled and ledger.state == TRAINING else "restarts"
        ledger = _charge(ledger, tail, t - ledger.mark)
        resume = ledger.saved_step
        ledger = dataclasses.replace(
            ledger, mark=t, state=RESTARTING, restarts=seen.restarts, step=None, resume_step=resume
        )
        ledger = dataclasses.replace(ledger, first_step=None, first_mark=None)
    if seen.saved_step is not None:
        ledger = dataclasses.replace(ledger, saved_step=seen.saved_step)
    if seen.finished or seen.suspended:
        state = DONE if seen.finished else ledger.state
        return _percent(dataclasses.replace(ledger, mark=max(t, ledger.mark), state=state))
    if ledger.state == SCHEDULING:
        ledger = dataclasses.replace(_charge(ledger, "scheduling", t - ledger.mark), mark=t)
        if seen.running:
            ledger = dataclasses.replace(ledger, state=STARTUP)
    if point is not None:
        ledger = _observe(ledger, point.step, _at(since, point.time))
    return _percent(ledger)


def _observe(ledger: Goodput, step: int, at: float) -> Goodput:
    """A step observation of the current attempt (seconds after `since`)."""
    if ledger.state == TRAINING:
        if at <= ledger.mark or ledger.step is None or step == ledger.step:
            return ledger  # nothing new (a new leader hears the last report again)
        return _segment(ledger, ledger.step, step, at, None)
    if ledger.state not in (STARTUP, RESTARTING):
        return ledger
    cause = _WAITING_CAUSE[ledger.state]
    at = max(at, ledger.mark)  # reported before the pass that saw the workers run
    if ledger.step_seconds is None:  # hold the segment open until a second point gives the rate
        if ledger.first_step is None or ledger.first_mark is None:
            return dataclasses.replace(ledger, first_step=step, first_mark=at)
        if step <= ledger.first_step or at <= ledger.first_mark:
            return ledger
        rate = (at - ledger.first_mark) / (step - ledger.first_step)
        ledger = dataclasses.replace(ledger, step_seconds=rate)
    first = (ledger.first_step, ledger.first_mark)
    ledger = dataclasses.replace(ledger, first_step=None, first_mark=None)
    if first[0] is not None and first[1] is not None and first[0] < step:
        ledger = _segment(ledger, _base(ledger, first[0]), first[0], first[1], cause)
        return _segment(ledger, first[0], step, at, None)
    return _segment(ledger, _base(ledger, step), step, at, cause)


def _base(ledger: Goodput, step: int) -> int:
    """The step an attempt's work began at: the resumed checkpoint's, else `step` less one after
    a restart, else 0."""
    if ledger.state == RESTARTING:
        resume = ledger.resume_step
        return resume if resume is not None and resume < step else step - 1
    return 0 if step > 0 else step


def _segment(ledger: Goodput, start: int, step: int, at: float, rest_cause: str | None) -> Goodput:
    """Charge [mark, at] in which the step went from `start` to `step`: the work by steps (redone
    up to the highest step before, good above), the rest to `rest_cause` (None: a stall). A step
    that went back without a counted restart (the program reloaded a checkpoint) charges the
    segment to restarts."""
    span = max(0.0, at - ledger.mark)
    if step < start:
        ledger = _charge(ledger, "restarts", span)
        return dataclasses.replace(ledger, mark=max(at, ledger.mark), step=step, state=TRAINING)
    steps = step - start
    recent = ledger.recent_step_seconds
    if steps > 0 and rest_cause is None and span > 0:  # between two points: the rate to learn
        recent = (*recent, round(span / steps, 4))[-RECENT:]
    rate = statistics.median(recent) if recent else ledger.step_seconds
    work = min(span, steps * (rate or 0.0))
    high = ledger.high_step if ledger.high_step is not None else start
    redone_steps = max(0, min(step, high) - start)
    redone = work * redone_steps / steps if steps else 0.0
    ledger = _charge(ledger, "redone", redone)
    ledger = _charge(ledger, "good", work - redone)
    ledger = _charge(ledger, rest_cause or "stalls", span - work)
    return dataclasses.replace(
        ledger,
        mark=max(at, ledger.mark),
        step=step,
        high_step=max(step, high),
        step_seconds=rate,
        recent_step_seconds=recent,
        state=TRAINING,
    )


def _charge(ledger: Goodput, cause: str, seconds: float) -> Goodput:
    if seconds <= 0:
        return ledger
    total = round(float(getattr(ledger.seconds, cause)) + seconds, 3)
    return dataclasses.replace(ledger, seconds=dataclasses.replace(ledger.seconds, **{cause: total}))


def _at(since: datetime, when: datetime) -> float:
    return round((when - since).total_seconds(), 3)


def counted(seconds: GoodputSeconds) -> float:
    """All the seconds the ledger has charged."""
    return seconds.good + sum(float(getattr(seconds, cause)) for cause in CAUSES)


def _percent(ledger: Goodput) -> Goodput:
    total = counted(ledger.seconds)
    percent = round(100 * ledger.seconds.good / total) if total > 0 else 0
    summary = None if ledger.high_step is None else f"{percent}%"
    return dataclasses.replace(ledger, percent=percent, summary=summary)
