"""The leader's memory of progress reports: per job, the latest record of each rank of the
current attempt, when it last changed, and the lead rank's recent steps (for the rate, started
again when the step goes back or the job's restart count changes: `eta.StepHistory`).

Thread-safe (one lock guards the dict and its entries; the endpoint's threads write, the
reconciler's workers read) and bounded: one entry per job, one report per rank
(`MAX_RANKS`), `eta.MAX_SAMPLES` steps per rank. No I/O and no clock: times are arguments.

The contract with the reconciler, so that 5,000 reporting jobs cost one pass per job per period
and not one per report:
- `report(...)` returns True only when the job goes from settled to unsettled — the caller
  enqueues the job then, and only then;
- the pass reads a `view` (with a `version`) and, once it has published what it needs,
  `settle(key, version)`: True when nothing arrived since the view (the entry is settled; the
  next change enqueues again), False when something did (the pass must come back by a timer:
  no report enqueues an unsettled job);
- a report that changes nothing (a heartbeat) is kept — when it arrived is what tells a stall
  from a reporting outage (`progress.stall`) — but enqueues nothing, unless the pass settled with
  `awaiting=True` (a stall due and unconfirmed, or reporting lost): then the next report of any
  kind enqueues the job, and any report since the view, not only a change, leaves it unsettled.
A report from another attempt (a whole-job restart made a new worker Job) replaces the entry: the
ranks of an old attempt never count for the new one. A report may carry the newest complete
checkpoint (rank 0's sidecar: `saved.py`); the entry keeps the last one told, dated when first
told, and a different one is a change.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from controller.progress.eta import StepHistory
from controller.progress.record import Record
from controller.progress.saved import Saved

MAX_RANKS = 4096
MAX_AGE = timedelta(days=365)
JITTER = timedelta(seconds=1)  # a reporter's "seconds since change" beyond this is clamped


@dataclass(frozen=True)
class RankReport:
    record: Record
    changed_at: datetime  # when the record last changed, as the reporter said (its age at receipt)
    received_at: datetime  # when its last report arrived, a change or a heartbeat


@dataclass(frozen=True)
class SavedAt:
    """A complete checkpoint a reporter told (`saved.Saved`), dated by the controller's clock."""

    name: str
    step: int | None
    time: datetime


@dataclass(frozen=True)
class JobView:
    """A consistent copy of one job's reports."""

    job_uid: str
    attempt: str  # the UID of the worker Job whose pods reported
    ranks: dict[int, RankReport]
    rate: float | None  # steps per second of the lead rank, recently
    version: int  # counts every report kept
    saved: SavedAt | None = None  # the newest complete checkpoint a rank told, and when it was saved


@dataclass
class _Entry:
    job_uid: str
    attempt: str
    ranks: dict[int, RankReport] = field(default_factory=dict)
    histories: dict[int, StepHistory] = field(default_factory=dict)
    version: int = 0  # counts every report kept
    changed_version: int = 0  # the version of the last report that changed something
    settled: bool = True
    awaiting: bool = False  # settled, and the next report of any kind enqueues
    restarts: int | None = None  # the job's restart count, as the last view was told it
    saved: SavedAt | None = None


def lead_rank(ranks: dict[int, RankReport]) -> int | None:
    """The rank whose record the status shows: the lowest one that reported a step, else the lowest."""
    stepped = [r for r, report in ranks.items() if report.record.step is not None]
    return min(stepped or ranks, default=None)


class ProgressStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def report(
        self,
        key: str,
        *,
        job_uid: str,
        attempt: str,
        rank: int,
        record: Record,
        seconds_since_change: float,
        now: datetime,
        saved: Saved | None = None,
    ) -> bool:
        """Keep rank `rank`'s latest `record` (and the checkpoint it told, `saved`: a new save is a
        change); True when the job needs a pass (module docstring)."""
        age = min(max(0.0, seconds_since_change), MAX_AGE.total_seconds())
        changed_at = now - timedelta(seconds=age)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.job_uid != job_uid or entry.attempt != attempt:
                entry = self._entries[key] = _Entry(job_uid, attempt)
            previous = entry.ranks.get(rank)
            if previous is None and len(entry.ranks) >= MAX_RANKS:
                return False
            if previous is not None and (
                changed_at < previous.changed_at
                or (record == previous.record and changed_at - previous.changed_at < JITTER)
            ):
                # the same change told again (its age measured over a network), or a late report:
                # the time of a change never moves back, nor by a network's jitter; a new record
                # is dated as told (the goodput ledger reads its step's time)
                changed_at = previous.changed_at
            entry.ranks[rank] = RankReport(record, changed_at, now)
            if record.step is not None:
                history = entry.histories.setdefault(rank, StepHistory(restarts=entry.restarts))
                history.add(changed_at.timestamp(), record.step)
            moved = previous is None or previous.record != record or previous.changed_at != changed_at
            known = entry.saved
            if saved is not None and (known is None or (known.name, known.step) != (saved.name, saved.step)):
                age = min(saved.age, MAX_AGE.total_seconds())
                entry.saved = SavedAt(saved.name, saved.step, now - timedelta(seconds=age))
                moved = True
            entry.version += 1
            if moved:
                entry.changed_version = entry.version
            if not (moved or entry.awaiting) or not entry.settled:
                return False
            entry.settled = entry.awaiting = False
            return True

    def view(self, key: str, restarts: int | None = None) -> JobView | None:
        """A copy of `key`'s reports; `restarts`, the job's `status.restarts`, starts the rate
        again when it changed (an in-place restart keeps the attempt: `eta.StepHistory`)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if restarts is not None:
                entry.restarts = restarts
                for each in entry.histories.values():
                    each.restarted(restarts)
            lead = lead_rank(entry.ranks)
            history = entry.histories.get(lead) if lead is not None else None
            rate = history.rate() if history is not None else None
            return JobView(entry.job_uid, entry.attempt, dict(entry.ranks), rate, entry.version, entry.saved)

    def settle(self, key: str, version: int, *, awaiting: bool = False) -> bool:
        """The pass that read `version` is done with it: True when no change arrived since (with
        `awaiting`: no report at all), and then the next change (with `awaiting`: the next report)
        enqueues the job; False when one did, and the pass must come back by a timer."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return True
            newer = entry.version if awaiting else entry.changed_version
            if newer > version:
                return False
            entry.settled, entry.awaiting = True, awaiting
            return True

    def forget(self, key: str) -> None:
        """The job is gone: its reports go with it."""
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
