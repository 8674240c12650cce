"""A delaying queue driven by a rate limiter (client-go's `rate_limiting_queue.go`).

`add_rate_limited(item)` records a failure of `item` with the limiter and adds it after the
delay the limiter returns; `forget(item)` clears the limiter's memory of it (call it when the
item was processed successfully, so the next failure starts from the shortest delay again).
The queue itself holds no per-item state beyond what `DelayingQueue` does.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from controller.clock import REAL_CLOCK, Clock
from controller.workqueue.delaying import DelayingQueue
from controller.workqueue.metrics import NOOP_METRICS_PROVIDER, MetricsProvider
from controller.workqueue.rate_limiters import RateLimiter

T = TypeVar("T", bound=Hashable)


class RateLimitingQueue(DelayingQueue[T]):
    """A `DelayingQueue` with `add_rate_limited`, `forget` and `num_requeues`."""

    def __init__(
        self,
        rate_limiter: RateLimiter[T],
        name: str = "",
        *,
        clock: Clock = REAL_CLOCK,
        metrics_provider: MetricsProvider = NOOP_METRICS_PROVIDER,
    ) -> None:
        super().__init__(name, clock=clock, metrics_provider=metrics_provider)
        self.rate_limiter = rate_limiter

    def add_rate_limited(self, item: T) -> None:
        """Add `item` once the rate limiter says it may be retried."""
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Reset the rate limiter's failure history of `item`."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self.rate_limiter.num_requeues(item)
