"""Workqueue metrics: the provider interface and the queue's own bookkeeping (client-go's
`metrics.go`).

A queue asks a `MetricsProvider` for one metric of each kind, labelled by the queue's name, and
keeps the per-item timestamps needed to turn add/get/done calls into durations. Guarantees:

- A queue whose name is "" records nothing: `new_queue_metrics`/`new_retry_metric` return `None`
  and the queue skips metrics entirely, so an unnamed queue pays nothing for them.
- `QueueMetrics` is not thread-safe on its own: the queue calls it with its lock held, which is
  also what makes `update_unfinished_work` see a consistent set of processing items.
- Durations come from the injected clock, so a `FakeClock` gives exact values in tests.

The metric objects are structural protocols, so `prometheus_client` metrics (and the no-op ones
here) satisfy them without importing this module.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from controller.clock import Clock

T = TypeVar("T", bound=Hashable)

UNFINISHED_WORK_UPDATE_PERIOD = 0.5
"""Seconds between recomputations of the unfinished-work gauges (client-go: 500 ms)."""


class GaugeMetric(Protocol):
    def inc(self) -> None: ...

    def dec(self) -> None: ...


class SettableGaugeMetric(Protocol):
    def set(self, value: float, /) -> None: ...


class CounterMetric(Protocol):
    def inc(self) -> None: ...


class HistogramMetric(Protocol):
    def observe(self, value: float, /) -> None: ...


class MetricsProvider(Protocol):
    """Makes the metrics of the queue called `name` (client-go's `MetricsProvider`)."""

    def new_depth_metric(self, name: str) -> GaugeMetric: ...

    def new_adds_metric(self, name: str) -> CounterMetric: ...

    def new_latency_metric(self, name: str) -> HistogramMetric: ...

    def new_work_duration_metric(self, name: str) -> HistogramMetric: ...

    def new_unfinished_work_seconds_metric(self, name: str) -> SettableGaugeMetric: ...

    def new_longest_running_processor_seconds_metric(self, name: str) -> SettableGaugeMetric: ...

    def new_retries_metric(self, name: str) -> CounterMetric: ...


class NoopMetric:
    """Every metric kind at once, recording nothing."""

    def inc(self) -> None:
        pass

    def dec(self) -> None:
        pass

    def set(self, value: float, /) -> None:
        pass

    def observe(self, value: float, /) -> None:
        pass


_NOOP = NoopMetric()


class NoopMetricsProvider:
    """The default provider: named queues keep their bookkeeping but publish nothing."""

    def new_depth_metric(self, name: str) -> GaugeMetric:
        return _NOOP

    def new_adds_metric(self, name: str) -> CounterMetric:
        return _NOOP

    def new_latency_metric(self, name: str) -> HistogramMetric:
        return _NOOP

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        return _NOOP

    def new_unfinished_work_seconds_metric(self, name: str) -> SettableGaugeMetric:
        return _NOOP

    def new_longest_running_processor_seconds_metric(self, name: str) -> SettableGaugeMetric:
        return _NOOP

    def new_retries_metric(self, name: str) -> CounterMetric:
        return _NOOP


NOOP_METRICS_PROVIDER: MetricsProvider = NoopMetricsProvider()


class QueueMetrics(Generic[T]):
    """client-go's `defaultQueueMetrics`: turns a queue's add/get/done calls into metrics.

    Call every method with the queue's lock held.
    """

    def __init__(self, provider: MetricsProvider, name: str, clock: Clock) -> None:
        self._clock = clock
        self._depth = provider.new_depth_metric(name)
        self._adds = provider.new_adds_metric(name)
        self._latency = provider.new_latency_metric(name)
        self._work_duration = provider.new_work_duration_metric(name)
        self._unfinished_work_seconds = provider.new_unfinished_work_seconds_metric(name)
        self._longest_running_processor = provider.new_longest_running_processor_seconds_metric(name)
        # when each queued item was first added since its last get, and when each processing
        # item was handed out
        self._add_times: dict[T, float] = {}
        self._processing_start_times: dict[T, float] = {}

    def add(self, item: T) -> None:
        self._adds.inc()
        self._depth.inc()
        if item not in self._add_times:
            self._add_times[item] = self._clock.now()

    def get(self, item: T) -> None:
        self._depth.dec()
        now = self._clock.now()
        self._processing_start_times[item] = now
        added = self._add_times.pop(item, None)
        if added is not None:
            self._latency.observe(now - added)

    def done(self, item: T) -> None:
        started = self._processing_start_times.pop(item, None)
        if started is not None:
            self._work_duration.observe(self._clock.now() - started)

    def update_unfinished_work(self) -> None:
        """Set the total and the longest age of the items being processed now."""
        now = self._clock.now()
        total = 0.0
        oldest = 0.0
        for started in self._processing_start_times.values():
            age = now - started
            total += age
            oldest = max(oldest, age)
        self._unfinished_work_seconds.set(total)
        self._longest_running_processor.set(oldest)


def new_queue_metrics(provider: MetricsProvider, name: str, clock: Clock) -> QueueMetrics[T] | None:
    """The bookkeeping for a queue called `name`, or None for an unnamed queue."""
    return QueueMetrics(provider, name, clock) if name else None


def new_retry_metric(provider: MetricsProvider, name: str) -> CounterMetric | None:
    """The retries counter of a queue called `name`, or None for an unnamed queue."""
    return provider.new_retries_metric(name) if name else None
