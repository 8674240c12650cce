"""The basic work queue (client-go's `queue.go`, type `Typed`).

Three structures under one lock carry every guarantee:

- `_queue`, a FIFO of items ready to hand out; each item appears in it at most once;
- `_dirty`, the items that need processing (queued, or re-added while being processed);
- `_processing`, the items handed out by `get` and not yet `done`.

An `add` of a dirty item is a no-op (stingy); an `add` of an item being processed only marks it
dirty, and `done` puts it back at the end of the FIFO (never two workers on one item). After
`shut_down`, `add` is ignored but `get` keeps handing out what is queued and then returns
`(None, True)`; `shut_down_with_drain` additionally blocks until the items being processed are done.

The hot path is one lock acquisition per call, no allocation beyond the containers, and no
metrics work at all for an unnamed queue; a condition is only notified when a getter waits.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from controller.clock import REAL_CLOCK, Clock
from controller.workqueue.metrics import (
    NOOP_METRICS_PROVIDER,
    UNFINISHED_WORK_UPDATE_PERIOD,
    MetricsProvider,
    QueueMetrics,
    new_queue_metrics,
)

T = TypeVar("T", bound=Hashable)


class Queue(Generic[T]):
    """A fair, stingy, thread-safe work queue for any number of producers and consumers."""

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock = REAL_CLOCK,
        metrics_provider: MetricsProvider = NOOP_METRICS_PROVIDER,
    ) -> None:
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        # separate conditions on the one lock, so a notify meant for a getter is never consumed
        # by a drain waiter or the metrics ticker
        self._item_ready = threading.Condition(self._lock)
        self._all_done = threading.Condition(self._lock)
        self._ticker = threading.Condition(self._lock)
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._waiting_getters = 0
        self._shutting_down = False
        self._drain = False
        self._metrics: QueueMetrics[T] | None = new_queue_metrics(metrics_provider, name, clock)
        if self._metrics is not None:
            self._start_thread(self._update_unfinished_work_loop, "metrics")

    def add(self, item: T) -> None:
        """Mark `item` as needing processing; queue it unless it is queued or being processed."""
        with self._lock:
            self._add_locked(item)

    def get(self) -> tuple[T | None, bool]:
        """Block until an item is ready and hand it out; `(None, True)` once shut down and empty.

        The caller owns the item until it calls `done(item)`.
        """
        with self._lock:
            queue = self._queue
            while not queue and not self._shutting_down:
                self._wait_for_item()
            if not queue:
                return None, True
            item = queue.popleft()
            if self._metrics is not None:
                self._metrics.get(item)
            self._processing.add(item)
            self._dirty.discard(item)
            return item, False

    def done(self, item: T) -> None:
        """Finish processing `item`; if it was re-added meanwhile, queue it again.

        `done` for an item that is not being processed does nothing (client-go would queue a
        dirty item a second time).
        """
        with self._lock:
            if item not in self._processing:
                return
            if self._metrics is not None:
                self._metrics.done(item)
            self._processing.remove(item)
            if item in self._dirty:
                self._queue.append(item)
                if self._waiting_getters:
                    self._item_ready.notify()
            if self._drain and not self._processing:
                self._all_done.notify_all()

    def len(self) -> int:
        """The number of items ready to hand out (not counting those being processed)."""
        with self._lock:
            return len(self._queue)

    def __len__(self) -> int:
        return self.len()

    def shut_down(self) -> None:
        """Stop accepting adds and wake every blocked getter; queued items are still handed out."""
        with self._lock:
            self._begin_shut_down(drain=False)

    def shut_down_with_drain(self) -> None:
        """Like `shut_down`, then block until every item being processed is done.

        Returns early if `shut_down` is called meanwhile (client-go's `ShutDownWithDrain`).
        """
        with self._lock:
            self._begin_shut_down(drain=True)
            while self._processing and self._drain:
                self._all_done.wait()

    def shutting_down(self) -> bool:
        with self._lock:
            return self._shutting_down

    def _add_locked(self, item: T) -> None:
        if self._shutting_down or item in self._dirty:
            return
        if self._metrics is not None:
            self._metrics.add(item)
        self._dirty.add(item)
        if item in self._processing:
            return
        self._queue.append(item)
        if self._waiting_getters:
            self._item_ready.notify()

    def _begin_shut_down(self, *, drain: bool) -> None:
        """Set the shutdown state and wake everyone who waits on it; called with the lock held."""
        self._drain = drain
        self._shutting_down = True
        self._item_ready.notify_all()
        self._all_done.notify_all()
        self._ticker.notify_all()

    def _wait_for_item(self) -> None:
        self._waiting_getters += 1
        try:
            self._item_ready.wait()
        finally:
            self._waiting_getters -= 1

    def _start_thread(self, target: Callable[[], None], role: str) -> None:
        thread = threading.Thread(target=target, name=f"workqueue-{self.name or 'unnamed'}-{role}")
        thread.daemon = True
        thread.start()

    def _update_unfinished_work_loop(self) -> None:
        """Recompute the unfinished-work gauges every period until shutdown."""
        metrics = self._metrics
        assert metrics is not None
        with self._lock:
            next_update = self._clock.now() + UNFINISHED_WORK_UPDATE_PERIOD
            while not self._shutting_down:
                now = self._clock.now()
                if now < next_update:
                    self._clock.wait(self._ticker, next_update - now)
                    continue
                metrics.update_unfinished_work()
                next_update = now + UNFINISHED_WORK_UPDATE_PERIOD
