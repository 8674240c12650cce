"""Rate limiters: how long to wait before retrying an item (client-go's
`default_rate_limiters.go`).

Every limiter is thread-safe and returns delays in seconds:

- `ItemExponentialFailureRateLimiter`: `base * 2**failures` per item, capped at `max_delay`
  (no overflow however many failures), reset by `forget`;
- `ItemFastSlowRateLimiter`: `fast_delay` for the first attempts, then `slow_delay`;
- `BucketRateLimiter`: an overall token bucket (burst, then `1/qps` apart), not per item;
- `MaxOfRateLimiter`: the longest delay of several limiters, which is how
  `default_controller_rate_limiter` combines per-item backoff with an overall bucket.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from controller.clock import REAL_CLOCK, Clock
from controller.flowcontrol import TokenBucket

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[T_contra]):
    def when(self, item: T_contra) -> float:
        """Record a failure of `item` and return the seconds to wait before retrying it."""

    def forget(self, item: T_contra) -> None:
        """Stop tracking `item` (it succeeded, or was given up on)."""

    def num_requeues(self, item: T_contra) -> int:
        """How many failures of `item` are being tracked."""


def _capped_backoff(base: float, exponent: int, cap: float) -> float:
    try:
        backoff = math.ldexp(base, exponent)
    except OverflowError:
        return cap
    return min(backoff, cap)


class _FailureCounts(Generic[T]):
    """Per-item failure counts, shared by the per-item limiters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: dict[T, int] = {}

    def record(self, item: T) -> int:
        """Count one more failure; return the number of failures before it."""
        with self._lock:
            previous = self._failures.get(item, 0)
            self._failures[item] = previous + 1
            return previous

    def forget(self, item: T) -> None:
        with self._lock:
            self._failures.pop(item, None)

    def count(self, item: T) -> int:
        with self._lock:
            return self._failures.get(item, 0)


class ItemExponentialFailureRateLimiter(Generic[T]):
    """`base_delay * 2**failures` for each item, capped at `max_delay`."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: _FailureCounts[T] = _FailureCounts()

    def when(self, item: T) -> float:
        return _capped_backoff(self.base_delay, self._failures.record(item), self.max_delay)

    def forget(self, item: T) -> None:
        self._failures.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._failures.count(item)


class ItemFastSlowRateLimiter(Generic[T]):
    """`fast_delay` for the first `max_fast_attempts` failures of an item, `slow_delay` after."""

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        self.fast_delay = fast_delay
        self.slow_delay = slow_delay
        self.max_fast_attempts = max_fast_attempts
        self._failures: _FailureCounts[T] = _FailureCounts()

    def when(self, item: T) -> float:
        attempt = self._failures.record(item) + 1
        return self.fast_delay if attempt <= self.max_fast_attempts else self.slow_delay

    def forget(self, item: T) -> None:
        self._failures.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._failures.count(item)


class BucketRateLimiter:
    """An overall limit of `qps` with bursts of `burst`, whatever the item."""

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = REAL_CLOCK) -> None:
        self._bucket = TokenBucket(qps, burst, clock)

    def when(self, item: Hashable) -> float:
        return self._bucket.reserve()

    def forget(self, item: Hashable) -> None:
        pass

    def num_requeues(self, item: Hashable) -> int:
        return 0


class MaxOfRateLimiter(Generic[T]):
    """The worst case of several limiters: the longest delay and the most requeues."""

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, item: T) -> float:
        # every limiter records the failure, even those with the shorter delay
        return max(limiter.when(item) for limiter in self._limiters)

    def forget(self, item: T) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


def default_controller_rate_limiter(clock: Clock = REAL_CLOCK) -> RateLimiter[Hashable]:
    """Per-item 5 ms..1000 s exponential backoff, and 10 qps / 100 burst overall
    (client-go's `DefaultControllerRateLimiter`)."""
    return MaxOfRateLimiter[Hashable](
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        BucketRateLimiter(qps=10.0, burst=100, clock=clock),
    )


def default_item_based_rate_limiter() -> RateLimiter[Hashable]:
    """Per-item 1 ms..1000 s exponential backoff (client-go's `DefaultItemBasedRateLimiter`)."""
    return ItemExponentialFailureRateLimiter[Hashable](0.001, 1000.0)
