"""Jittered exponential backoff that resets after a quiet period (client-go's
`wait.NewExponentialBackoffManager(800ms, 30s, 2m, 2.0, 1.0)` used by reflectors)."""

from __future__ import annotations

import random
import threading

from controller.clock import REAL_CLOCK, Clock


class Backoff:
    def __init__(
        self,
        initial: float = 0.8,
        maximum: float = 30.0,
        reset_after: float = 120.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        clock: Clock = REAL_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        self.initial, self.maximum, self.reset_after = initial, maximum, reset_after
        self.factor, self.jitter = factor, jitter
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._current = initial
        self._last: float | None = None

    def next(self) -> float:
        """The next delay: doubles each call, capped, jittered by up to `jitter`× itself; starts
        over at `initial` when the previous call was more than `reset_after` seconds ago."""
        with self._lock:
            now = self._clock.now()
            if self._last is not None and now - self._last > self.reset_after:
                self._current = self.initial
            self._last = now
            delay = self._current
            self._current = min(self._current * self.factor, self.maximum)
        return delay + self._rng.random() * self.jitter * delay if self.jitter > 0 else delay
