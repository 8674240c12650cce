"""Clocks: the one place the runtime reads time, so tests can drive it.

`RealClock` wraps `time.monotonic` (for durations and deadlines) and `time.time` (for wall-clock
timestamps). `FakeClock` only moves when a test calls `step` or `set`; `sleep`/`wait` on a fake
clock block until the fake time has advanced far enough, which lets a test drive a delaying
queue's background thread deterministically. Mirrors k8s.io/utils/clock and its testing fake.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Protocol


def utc_now() -> datetime:
    """Wall-clock now in UTC at the API's precision (whole seconds), so unchanged timestamps in a
    status compare equal to what the API server returns."""
    return datetime.now(timezone.utc).replace(microsecond=0)


def utc_now_precise() -> datetime:
    """Wall-clock now in UTC to the microsecond: for times that are differenced, never compared
    with the API's (when a progress report arrived; the goodput ledger's clock)."""
    return datetime.now(timezone.utc)


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds; only differences are meaningful."""

    def wall(self) -> float:
        """Seconds since the epoch."""

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on `cond` (held by the caller) for at most `timeout` clock seconds."""


class RealClock:
    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        cond.wait(timeout)


class FakeClock:
    """A clock that moves only when told. Waiters are woken whenever it moves."""

    def __init__(self, start: float = 1_000.0, wall_start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._now = start
        self._wall_offset = wall_start - start
        self._conds: set[threading.Condition] = set()

    def now(self) -> float:
        with self._lock:
            return self._now

    def wall(self) -> float:
        with self._lock:
            return self._now + self._wall_offset

    def step(self, seconds: float) -> None:
        self.set(self.now() + seconds)

    def set(self, t: float) -> None:
        with self._lock:
            self._now = t
            conds = list(self._conds)
        for c in conds:
            with c:
                c.notify_all()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        # Time is fake: a waiter is woken by notify or by `set`; the real-time cap keeps a
        # missed wake-up from hanging a test.
        with self._lock:
            self._conds.add(cond)
        try:
            cond.wait(0.05 if timeout is not None else None)
        finally:
            with self._lock:
                self._conds.discard(cond)

    def has_waiters(self) -> bool:
        with self._lock:
            return bool(self._conds)


REAL_CLOCK: Clock = RealClock()
