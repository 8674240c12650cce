"""Workqueue metrics under client-go's names, read back from a fresh Prometheus registry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from testbed import wait_until

from controller.clock import FakeClock
from controller.metrics.workqueue import DURATION_BUCKETS, PrometheusWorkqueueMetricsProvider
from controller.workqueue import ItemExponentialFailureRateLimiter, Queue, RateLimitingQueue
from controller.workqueue.metrics import NOOP_METRICS_PROVIDER

pytestmark = pytest.mark.timeout(60)

METRIC_NAMES = {
    "workqueue_depth",
    "workqueue_adds",
    "workqueue_queue_duration_seconds",
    "workqueue_work_duration_seconds",
    "workqueue_unfinished_work_seconds",
    "workqueue_longest_running_processor_seconds",
    "workqueue_retries",
}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(registry: CollectorRegistry, clock: FakeClock) -> Iterator[RateLimitingQueue[str]]:
    provider = PrometheusWorkqueueMetricsProvider(registry)
    limiter = ItemExponentialFailureRateLimiter[str](1.0, 100.0)
    q: RateLimitingQueue[str] = RateLimitingQueue(limiter, "jobs", clock=clock, metrics_provider=provider)
    yield q
    q.shut_down()


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"name": "jobs", **labels})


def test_the_provider_registers_client_gos_metric_families(registry: CollectorRegistry) -> None:
    PrometheusWorkqueueMetricsProvider(registry)

    families = {family.name: family for family in registry.collect()}

    assert set(families) == METRIC_NAMES
    assert families["workqueue_adds"].type == "counter"
    assert families["workqueue_depth"].type == "gauge"
    assert families["workqueue_work_duration_seconds"].type == "histogram"
    assert list(DURATION_BUCKETS) == pytest.approx([1e-8 * 10**i for i in range(10)], rel=1e-9)


def test_adds_and_depth_count_distinct_adds_until_get(
    registry: CollectorRegistry, queue: RateLimitingQueue[str]
) -> None:
    queue.add("a")
    queue.add("b")
    queue.add("a")  # deduplicated: not an add

    assert sample(registry, "workqueue_adds_total") == 2
    assert sample(registry, "workqueue_depth") == 2

    queue.get()
    assert sample(registry, "workqueue_depth") == 1


def test_queue_and_work_durations_come_from_the_clock(
    registry: CollectorRegistry, clock: FakeClock, queue: RateLimitingQueue[str]
) -> None:
    queue.add("a")
    queue.add("b")
    clock.step(1.0)
    assert queue.get() == ("a", False)  # "a" waited 1 s
    clock.step(2.0)
    queue.done("a")  # and was processed for 2 s
    queue.get()  # "b" waited 3 s

    assert sample(registry, "workqueue_queue_duration_seconds_count") == 2
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == pytest.approx(4.0)
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="1.0") == 1
    assert sample(registry, "workqueue_work_duration_seconds_count") == 1
    assert sample(registry, "workqueue_work_duration_seconds_sum") == pytest.approx(2.0)
    assert sample(registry, "workqueue_work_duration_seconds_bucket", le="1.0") == 0
    assert sample(registry, "workqueue_work_duration_seconds_bucket", le="10.0") == 1


def test_every_add_after_counts_as_a_retry(
    registry: CollectorRegistry, queue: RateLimitingQueue[str]
) -> None:
    queue.add_rate_limited("a")
    queue.add_rate_limited("a")
    queue.add_after("b", 0)  # client-go counts every AddAfter, immediate or not
    queue.add("c")  # a plain add is not a retry

    assert sample(registry, "workqueue_retries_total") == 3
    assert sample(registry, "workqueue_adds_total") == 2  # "b" and "c"; "a" still waits


def test_unfinished_work_is_the_age_of_the_items_being_processed(
    registry: CollectorRegistry, clock: FakeClock, queue: RateLimitingQueue[str]
) -> None:
    queue.add("a")
    queue.add("b")
    queue.get()
    clock.step(1.0)
    queue.get()
    clock.step(3.0)  # "a" has run 4 s, "b" 3 s; the 500 ms update is overdue

    def longest() -> float | None:
        return sample(registry, "workqueue_longest_running_processor_seconds")

    wait_until(lambda: longest() == pytest.approx(4.0), message="the longest running processor at 4 s")
    assert sample(registry, "workqueue_unfinished_work_seconds") == pytest.approx(7.0)

    queue.done("a")
    queue.done("b")
    clock.step(1.0)
    wait_until(lambda: longest() == 0.0, message="no running processor")
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0.0


def test_an_unnamed_queue_records_nothing(registry: CollectorRegistry, clock: FakeClock) -> None:
    queue: Queue[str] = Queue(clock=clock, metrics_provider=PrometheusWorkqueueMetricsProvider(registry))
    queue.add("a")
    assert queue.get() == ("a", False)
    queue.done("a")

    series = [s for family in registry.collect() for s in family.samples]
    assert series == []


def test_a_re_add_while_processing_is_timed_from_the_re_add(
    registry: CollectorRegistry, clock: FakeClock, queue: RateLimitingQueue[str]
) -> None:
    queue.add("a")
    queue.get()
    clock.step(1.0)
    queue.add("a")  # deferred until done, but counted and timed from now
    assert sample(registry, "workqueue_depth") == 1
    clock.step(2.0)
    queue.done("a")
    clock.step(1.0)
    queue.get()

    assert sample(registry, "workqueue_adds_total") == 2
    assert sample(registry, "workqueue_depth") == 0
    assert sample(registry, "workqueue_work_duration_seconds_sum") == pytest.approx(3.0)
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == pytest.approx(0.0 + 3.0)


def test_a_named_queue_with_the_no_op_provider_works_and_publishes_nothing(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    queue: Queue[str] = Queue("jobs", clock=clock, metrics_provider=NOOP_METRICS_PROVIDER)
    try:
        queue.add("a")
        assert queue.get() == ("a", False)
        queue.done("a")
        assert queue.len() == 0
    finally:
        queue.shut_down()
