"""A work queue that can add an item later (client-go's `delaying_queue.go`).

`add_after(item, seconds)` parks the item in a heap ordered by ready time; one background thread
sleeps on the injected clock until the earliest ready time and then `add`s every ready item, so
the usual dedup rules apply from there on. Guarantees:

- items become ready in order of ready time (ties in order of `add_after`);
- an item waiting more than once keeps its earliest ready time: a later `add_after` for it is
  ignored, an earlier one moves it forward (client-go's `insert`);
- `seconds <= 0` adds immediately; every `add_after` counts as a retry in the queue's metrics;
- after shutdown `add_after` is ignored, waiting items are dropped and the thread exits.

The heap shares the queue's lock, so a ready item leaves the heap and enters the queue in one step
(`waiting_len() == 0` means every parked item has been added) and there is no lock ordering to
get wrong. The thread sleeps through `Clock.wait`, so a `FakeClock` drives it deterministically.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Hashable
from typing import Generic, TypeVar

from controller.clock import REAL_CLOCK, Clock
from controller.workqueue.metrics import NOOP_METRICS_PROVIDER, MetricsProvider, new_retry_metric
from controller.workqueue.queue import Queue

T = TypeVar("T", bound=Hashable)


class _Waiting(Generic[T]):
    """One parked item; ordered by ready time, then by arrival."""

    __slots__ = ("item", "ready_at", "seq")

    def __init__(self, ready_at: float, seq: int, item: T) -> None:
        self.ready_at = ready_at
        self.seq = seq
        self.item = item

    def __lt__(self, other: _Waiting[T]) -> bool:
        return (self.ready_at, self.seq) < (other.ready_at, other.seq)


class DelayingQueue(Queue[T]):
    """A `Queue` with `add_after`."""

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock = REAL_CLOCK,
        metrics_provider: MetricsProvider = NOOP_METRICS_PROVIDER,
    ) -> None:
        super().__init__(name, clock=clock, metrics_provider=metrics_provider)
        self._retries = new_retry_metric(metrics_provider, name)
        self._waiting_changed = threading.Condition(self._lock)
        # a heap of entries plus the live entry per item; an entry replaced by an earlier one
        # stays in the heap and is skipped when popped (heapq has no decrease-key)
        self._waiting: list[_Waiting[T]] = []
        self._waiting_by_item: dict[T, _Waiting[T]] = {}
        self._arrivals = itertools.count()
        self._start_thread(self._waiting_loop, "delaying")

    def add_after(self, item: T, seconds: float) -> None:
        """Add `item` once `seconds` have passed on the queue's clock."""
        with self._lock:
            if self._shutting_down:
                return
            if self._retries is not None:
                self._retries.inc()
            if seconds > 0:
                self._park(item, self._clock.now() + seconds)
            else:
                self._add_locked(item)

    def waiting_len(self) -> int:
        """The number of items parked until a later time."""
        with self._lock:
            return len(self._waiting_by_item)

    def _park(self, item: T, ready_at: float) -> None:
        existing = self._waiting_by_item.get(item)
        if existing is not None and existing.ready_at <= ready_at:
            return
        entry = _Waiting(ready_at, next(self._arrivals), item)
        self._waiting_by_item[item] = entry
        heapq.heappush(self._waiting, entry)
        if self._waiting[0] is entry:
            self._waiting_changed.notify()

    def _begin_shut_down(self, *, drain: bool) -> None:
        super()._begin_shut_down(drain=drain)
        self._waiting.clear()
        self._waiting_by_item.clear()
        self._waiting_changed.notify_all()

    def _waiting_loop(self) -> None:
        """Until shutdown, move ready items into the queue and sleep until the next is due."""
        with self._lock:
            while not self._shutting_down:
                now = self._clock.now()
                self._unpark_ready(now)
                timeout = self._waiting[0].ready_at - now if self._waiting else None
                self._clock.wait(self._waiting_changed, timeout)

    def _unpark_ready(self, now: float) -> None:
        waiting = self._waiting
        while waiting and waiting[0].ready_at <= now:
            entry = heapq.heappop(waiting)
            if self._waiting_by_item.get(entry.item) is entry:
                del self._waiting_by_item[entry.item]
                self._add_locked(entry.item)
