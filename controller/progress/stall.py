"""The stall decision: has a reporting job stopped making progress, or have its reports stopped
reaching us?

Input: each rank that reported in the current attempt, with its last step, when its record last
changed and when its last report arrived; the job's `stallTimeoutSeconds` (None: never stalled);
now. A stall is a claim about training, so it needs evidence that reports still arrive: a rank's
heartbeat (`reporter.HEARTBEAT_SECONDS`) says "unchanged, still here". Without that evidence the
silence may be ours — an endpoint outage, an expired certificate, a rotated CA — and restarting
healthy jobs for it would fail them. The rules, in order:
- no rank reported → not reporting: never stalled (a job that never reports is never called
  stalled, whatever its timeout);
- the attempt ended (`ended`) → reporting, nothing more: its reports stop by design;
- no report from any rank for `lost_after(timeout)` (the timeout, but at least two heartbeat
  periods plus the reporter's longest backoff: one lost heartbeat and its retries are no outage),
  counted from a worker pod's later start (`started`: a new pod's reporter has nothing to say
  until its program writes a record) → lost since the last report: never stalled, never an
  action, and `awaiting` (the next report, even an unchanged one, must come back to say so);
- the stall is due — the newest change of any rank, or a worker pod of the attempt started since
  (`started`: a hot reload or a rank's pod recreated in place, so a job loading again is not
  called stalled for the time it was away), is at least `timeout` old — and a report arrived
  at or after that moment → stalled since the newest change; every rank is silent;
- due but no report arrived since → not yet stalled (`awaiting`: the next heartbeat confirms it,
  or the lost window passes first);
- else progressing; the ranks silent for `timeout` or longer are named.
`recheck_after` is when the verdict changes if no report arrives (the stall falls due, or
reporting is lost): a timer, so nobody has to poll.

The startup decision (`starting`) covers what the rules above cannot: a start that hangs before
any training process writes a record — rendezvous, NCCL init, the first batch — sends nothing, so
no heartbeat can prove anything and the clock cannot start at a report. It starts at the workers'
start (`started`: the newest start of the attempt's training containers, once every worker's
runs), and the startup is over at the first training report since then: a record with a step
from any rank, changed at or after `started` (a record without a step says the program runs, not
that it trains; one from before `started` is an earlier program's, e.g. before a hot reload), or
a step the status shows with an update time at or after `started` (`shown`: the last leader heard
it, and this one has not yet — a failover); "at or after" allows `START_SLACK` for the two
clocks. One rank's step ends it for all: rendezvous and the process group's init are collective,
so no rank steps before every rank is past them (and with rank-0-only reporting the other ranks
never report at all). Without a timeout or before every
worker runs, it does not apply; before `started + timeout`, a timer for then; after it, stalled,
naming the ranks with no record since `started` and those whose records have no step. It needs no
evidence that reports arrive — there is nothing to hear before a first record — so an outage of the
reports during a start is taken for a hang: only jobs that asked (a startup timeout) or are known
to report are checked (controller/torchrunjob/progress.py decides which).
Pure: no clock, no I/O; the table in test/unit/test_progress_stall.py is the whole contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from controller.api import format_time
from controller.progress.sidecar.reporter import (
    HEARTBEAT_SECONDS,
    MAX_BACKOFF,
    POLL_SECONDS,
    PUSH_MIN_SECONDS,
)

# a reporter's heartbeat comes HEARTBEAT_SECONDS after the earliest next push (PUSH_MIN_SECONDS after
# the last accepted one), seen at its next poll
HEARTBEAT_PERIOD = HEARTBEAT_SECONDS + PUSH_MIN_SECONDS + POLL_SECONDS
LOST_FLOOR = 2 * HEARTBEAT_PERIOD + MAX_BACKOFF
# a record changed this long before the workers' start still counts as since it: the start is the
# node's clock in whole seconds, the change the controller's clock less the age the reporter told
START_SLACK = timedelta(seconds=5)


@dataclass(frozen=True)
class RankState:
    rank: int
    step: int | None
    changed_at: datetime
    received_at: datetime  # when its last report (a change or a heartbeat) arrived


@dataclass(frozen=True)
class Verdict:
    reporting: bool
    stalled: bool = False
    lost: bool = False  # no report from any rank for the lost window: say so, do nothing
    since: datetime | None = None  # stalled: the last change of any rank; lost: the last report
    silent: tuple[int, ...] = ()  # ranks with no change for the timeout or longer
    recheck_after: float | None = None  # seconds until the verdict changes if no report arrives
    awaiting: bool = False  # the next report, even an unchanged one, changes the verdict

    def message(self, ranks: Sequence[RankState], timeout: int | None) -> str:
        """What the Progressing condition says: the last step, since when, the silent ranks."""
        newest = max(ranks, key=lambda r: (r.changed_at, r.step or 0), default=None)
        if newest is None:
            return "no progress reported"
        step = "no step" if newest.step is None else f"step {newest.step}"
        if self.lost:
            return (
                f"no progress report from any rank for {lost_after(timeout):g}s or more: the last "
                f"arrived at {format_time(self.since or newest.received_at)}, saying {step} (rank "
                f"{newest.rank}); training may be running, the reports do not reach the controller "
                "(its endpoint, certificate or network): no action is taken"
            )
        if not self.stalled:
            said = f"{step} reported by rank {newest.rank} at {format_time(newest.changed_at)}"
            return said + (f"; silent for {timeout}s or more: {_ranks(self.silent)}" if self.silent else "")
        return (
            f"no new progress record from any rank for {timeout}s or more: the last was {step} "
            f"(rank {newest.rank}) at {format_time(newest.changed_at)}; silent: {_ranks(self.silent)}"
        )


def lost_after(timeout: int | None) -> float:
    """Seconds without any report after which reporting is lost: the timeout, at least
    `LOST_FLOOR`."""
    return max(float(timeout or 0), LOST_FLOOR)


def decide(
    ranks: Sequence[RankState],
    timeout: int | None,
    now: datetime,
    started: datetime | None = None,
    ended: bool = False,
) -> Verdict:
    """The verdict of the module docstring's rules; `started`: when the newest worker pod of the
    attempt started; `ended`: the attempt ended."""
    if not ranks:
        return Verdict(reporting=False)
    if ended:
        return Verdict(reporting=True)
    heard = max(r.received_at for r in ranks)
    lost_at = max(heard, started or heard) + timedelta(seconds=lost_after(timeout))
    if now >= lost_at:
        return Verdict(reporting=True, lost=True, since=heard, awaiting=True)
    until_lost = (lost_at - now).total_seconds()
    if timeout is None:
        return Verdict(reporting=True, recheck_after=until_lost)
    latest = max(r.changed_at for r in ranks)
    due = max(latest, started or latest) + timedelta(seconds=timeout)
    silent = tuple(sorted(r.rank for r in ranks if (now - r.changed_at).total_seconds() >= timeout))
    if now < due:
        return Verdict(
            reporting=True, silent=silent, recheck_after=min((due - now).total_seconds(), until_lost)
        )
    if heard >= due:
        return Verdict(reporting=True, stalled=True, since=latest, silent=silent, recheck_after=until_lost)
    return Verdict(reporting=True, silent=silent, recheck_after=until_lost, awaiting=True)


@dataclass(frozen=True)
class Startup:
    """The startup verdict: `stalled` once `timeout` passed with no training report since the
    workers' start at `since`; else `recheck_after`, the seconds until it falls due."""

    since: datetime  # the workers' start: the clock's start
    timeout: int
    stalled: bool = False
    never: tuple[int, ...] = ()  # ranks with no record since the workers' start
    stepless: tuple[int, ...] = ()  # ranks whose records since then have no step
    recheck_after: float | None = None

    def message(self) -> str:
        """What `Progressing=False StartupStalled` says: the timeout, the start, the silent ranks."""
        start = format_time(self.since)
        said = f"no rank reported a training step within {self.timeout}s of the workers' start at {start}"
        if self.never:
            said += f"; never reported: {_ranks(self.never)}"
        if self.stepless:
            said += f"; reported no step: {_ranks(self.stepless)}"
        return said


def starting(
    ranks: Sequence[RankState],
    nodes: int,
    timeout: int | None,
    now: datetime,
    started: datetime | None,
    shown: datetime | None = None,
) -> Startup | None:
    """The module docstring's startup decision for an attempt of `nodes` ranks; None when it does
    not apply (no timeout, not every worker runs yet) or the startup is over. `shown`: the update
    time of the step `status.progress` shows (None without a step)."""
    if timeout is None or started is None:
        return None
    since = started - START_SLACK
    if shown is not None and shown >= since:
        return None
    fresh = [r for r in ranks if r.changed_at >= since]
    if any(r.step is not None for r in fresh):
        return None
    due = started + timedelta(seconds=timeout)
    if now < due:
        return Startup(since=started, timeout=timeout, recheck_after=(due - now).total_seconds())
    heard = {r.rank for r in fresh}
    never = tuple(r for r in range(nodes) if r not in heard)
    return Startup(since=started, timeout=timeout, stalled=True, never=never, stepless=tuple(sorted(heard)))


NAMED = 16  # ranks named in a message; the rest are counted


def _ranks(ranks: Sequence[int]) -> str:
    named = ", ".join(f"rank {r}" for r in ranks[:NAMED])
    return named + (f" and {len(ranks) - NAMED} more" if len(ranks) > NAMED else "")
