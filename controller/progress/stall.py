"""The stall decision: has a reporting job stopped making progress?

Input: each rank that reported in the current attempt, with its last step and when its record
last changed; the job's `stallTimeoutSeconds` (None: never stalled); now. The rules, in order:
- no rank reported → not reporting: never stalled (a job that never reports is never called
  stalled, whatever its timeout);
- no timeout → reporting, never stalled;
- the newest change of any rank is at least `timeout` old → stalled since that change; every
  rank is silent (no new record from any rank) — unless a worker pod of the attempt started
  since (`started`: a hot reload or a rank's pod recreated in place): the clock then runs from
  that start, so a job loading again is not called stalled for the time it was away;
- else progressing; the ranks silent for `timeout` or longer are named, and `recheck_after` is
  when the stall would begin if nothing changes (a timer, so nobody has to poll).
Pure: no clock, no I/O; the table in test/unit/test_progress_stall.py is the whole contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from controller.api import format_time


@dataclass(frozen=True)
class RankState:
    rank: int
    step: int | None
    changed_at: datetime


@dataclass(frozen=True)
class Verdict:
    reporting: bool
    stalled: bool = False
    since: datetime | None = None  # stalled: the last change of any rank
    silent: tuple[int, ...] = ()  # ranks with no change for the timeout or longer
    recheck_after: float | None = None  # seconds until the stall begins if nothing changes

    def message(self, ranks: Sequence[RankState], timeout: int | None) -> str:
        """What the Progressing condition says: the last step, since when, the silent ranks."""
        newest = max(ranks, key=lambda r: (r.changed_at, r.step or 0), default=None)
        if newest is None:
            return "no progress reported"
        step = "no step" if newest.step is None else f"step {newest.step}"
        if not self.stalled:
            said = f"{step} reported by rank {newest.rank} at {format_time(newest.changed_at)}"
            return said + (f"; silent for {timeout}s or more: {_ranks(self.silent)}" if self.silent else "")
        return (
            f"no new progress record from any rank for {timeout}s or more: the last was {step} "
            f"(rank {newest.rank}) at {format_time(newest.changed_at)}; silent: {_ranks(self.silent)}"
        )


def decide(
    ranks: Sequence[RankState], timeout: int | None, now: datetime, started: datetime | None = None
) -> Verdict:
    """The verdict of the module docstring's rules; `started`: when the newest worker pod of the
    attempt started."""
    if not ranks:
        return Verdict(reporting=False)
    if timeout is None:
        return Verdict(reporting=True)
    latest = max(r.changed_at for r in ranks)
    clock = max(latest, started) if started is not None else latest
    silent = tuple(sorted(r.rank for r in ranks if (now - r.changed_at).total_seconds() >= timeout))
    left = timeout - (now - clock).total_seconds()
    if left <= 0:
        return Verdict(reporting=True, stalled=True, since=latest, silent=silent)
    return Verdict(reporting=True, silent=silent, recheck_after=left)


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(f"rank {r}" for r in ranks)
