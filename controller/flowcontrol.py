"""A token bucket (golang.org/x/time/rate semantics), shared by the REST client's QPS/burst limit and
the workqueue's bucket rate limiter.

`reserve()` takes a token now, possibly going into debt, and returns how long the caller must
wait before using it — exactly `rate.Limiter.Reserve().Delay()`, which client-go's
`BucketRateLimiter.When` returns. `accept()` reserves and sleeps (client-go's
`flowcontrol.RateLimiter.Accept`). `allow()` takes a token only when one is there now, never
going into debt (`rate.Limiter.Allow`; client-go's `TryAccept`): for callers that must not wait.
Thread-safe; the clock is injectable.
"""

from __future__ import annotations

import threading
import time

from controller.clock import REAL_CLOCK, Clock


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Clock = REAL_CLOCK) -> None:
        if qps <= 0 or burst <= 0:
            raise ValueError("qps and burst must be positive")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = clock.now()

    def reserve(self) -> float:
        """Take one token; return the seconds to wait before it is really available."""
        with self._lock:
            now = self._clock.now()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def allow(self) -> bool:
        """Take one token if one is available now; never waits, never goes into debt."""
        with self._lock:
            now = self._clock.now()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    def accept(self) -> float:
        """Block until a token is available; return the seconds waited."""
        delay = self.reserve()
        if delay > 0:
            time.sleep(delay)
        return delay
