"""The delaying and rate-limiting queues, driven by a fake clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from testbed import wait_until

from controller.clock import FakeClock
from controller.workqueue import (
    DelayingQueue,
    ItemExponentialFailureRateLimiter,
    RateLimitingQueue,
)

pytestmark = pytest.mark.timeout(60)


def drain(queue: DelayingQueue[str]) -> list[str]:
    """Every ready item, in order, each marked done."""
    items = []
    while queue.len():
        item, shutdown = queue.get()
        assert not shutdown
        assert item is not None
        queue.done(item)
        items.append(item)
    return items


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> Iterator[DelayingQueue[str]]:
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    yield q
    q.shut_down()


def test_an_item_is_added_when_its_delay_has_passed(clock: FakeClock, queue: DelayingQueue[str]) -> None:
    queue.add_after("a", 1.0)
    assert queue.len() == 0
    assert queue.waiting_len() == 1

    clock.step(0.5)
    time.sleep(0.06)  # longer than FakeClock's real-time wait cap: the thread has looked again
    assert queue.len() == 0

    clock.step(0.5)
    wait_until(lambda: queue.len() == 1, message="one item ready")
    assert queue.waiting_len() == 0
    assert drain(queue) == ["a"]


def test_fake_time_not_real_time_makes_items_ready(queue: DelayingQueue[str]) -> None:
    queue.add_after("a", 0.01)
    time.sleep(0.1)
    assert queue.len() == 0
    assert queue.waiting_len() == 1


def test_items_become_ready_in_order_of_ready_time(clock: FakeClock, queue: DelayingQueue[str]) -> None:
    queue.add_after("c", 3.0)
    queue.add_after("a", 1.0)
    queue.add_after("b", 2.0)
    queue.add_after("a2", 1.0)  # same time as "a", added later

    clock.step(1.0)
    wait_until(lambda: queue.len() == 2, message="two items ready")
    assert drain(queue) == ["a", "a2"]

    clock.step(5.0)
    wait_until(lambda: queue.len() == 2, message="two items ready")
    assert drain(queue) == ["b", "c"]


def test_a_later_add_after_for_a_waiting_item_is_ignored(clock: FakeClock, queue: DelayingQueue[str]) -> None:
    queue.add_after("a", 1.0)
    queue.add_after("a", 5.0)
    assert queue.waiting_len() == 1

    clock.step(1.0)
    wait_until(lambda: queue.len() == 1, message="one item ready")
    assert queue.waiting_len() == 0  # the 5 s request left nothing behind
    assert drain(queue) == ["a"]


def test_an_earlier_add_after_moves_a_waiting_item_forward(
    clock: FakeClock, queue: DelayingQueue[str]
) -> None:
    queue.add_after("a", 5.0)
    queue.add_after("b", 2.0)
    queue.add_after("a", 1.0)
    assert queue.waiting_len() == 2

    clock.step(1.0)
    wait_until(lambda: queue.len() == 1, message="one item ready")
    assert drain(queue) == ["a"]

    clock.step(4.0)
    wait_until(lambda: queue.len() == 1, message="one item ready")
    assert drain(queue) == ["b"]  # "a"'s superseded 5 s entry added nothing
    assert queue.waiting_len() == 0


def test_an_item_can_wait_again_after_it_was_added(clock: FakeClock, queue: DelayingQueue[str]) -> None:
    queue.add_after("a", 1.0)
    clock.step(1.0)
    wait_until(lambda: queue.len() == 1, message="one item ready")
    assert drain(queue) == ["a"]

    queue.add_after("a", 3.0)
    clock.step(2.0)
    time.sleep(0.06)
    assert queue.len() == 0
    clock.step(1.0)
    wait_until(lambda: queue.len() == 1, message="one item ready")


def test_a_zero_or_negative_delay_adds_at_once(queue: DelayingQueue[str]) -> None:
    queue.add_after("a", 0)
    queue.add_after("b", -1.0)

    assert queue.waiting_len() == 0
    assert drain(queue) == ["a", "b"]


def test_a_ready_item_follows_the_usual_dedup_rules(clock: FakeClock, queue: DelayingQueue[str]) -> None:
    queue.add("a")
    assert queue.get() == ("a", False)
    queue.add_after("a", 1.0)

    clock.step(1.0)
    wait_until(lambda: queue.waiting_len() == 0, message="nothing waiting")
    assert queue.len() == 0  # "a" is still being processed: the add is deferred

    queue.done("a")
    assert drain(queue) == ["a"]


def test_shut_down_drops_waiting_items_and_stops_the_thread(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue("stopping", clock=clock)
    queue.add_after("a", 1.0)
    threads = [t for t in threading.enumerate() if t.name == "workqueue-stopping-delaying"]
    assert len(threads) == 1

    queue.shut_down()
    queue.add_after("b", 1.0)
    queue.add_after("c", 0)

    threads[0].join(5.0)
    assert not threads[0].is_alive()
    assert queue.waiting_len() == 0
    assert queue.get() == (None, True)


def test_shut_down_with_drain_also_stops_the_thread(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue("draining", clock=clock)
    thread = next(t for t in threading.enumerate() if t.name == "workqueue-draining-delaying")

    queue.shut_down_with_drain()

    thread.join(5.0)
    assert not thread.is_alive()


def test_with_the_real_clock_an_item_arrives_after_its_delay() -> None:
    queue: DelayingQueue[str] = DelayingQueue()
    try:
        start = time.monotonic()
        queue.add_after("a", 0.02)
        item, shutdown = queue.get()
        elapsed = time.monotonic() - start
    finally:
        queue.shut_down()

    assert (item, shutdown) == ("a", False)
    assert elapsed >= 0.02


def test_rate_limited_adds_back_off_per_item_until_forgotten(clock: FakeClock) -> None:
    limiter = ItemExponentialFailureRateLimiter[str](1.0, 100.0)
    queue: RateLimitingQueue[str] = RateLimitingQueue(limiter, clock=clock)
    try:
        queue.add_rate_limited("a")  # 1 s
        queue.add_rate_limited("a")  # 2 s, but "a" already waits until 1 s
        assert queue.num_requeues("a") == 2
        assert queue.num_requeues("b") == 0

        clock.step(1.0)
        wait_until(lambda: queue.len() == 1, message="one item ready")
        assert drain(queue) == ["a"]
        assert queue.waiting_len() == 0

        queue.add_rate_limited("a")  # third failure: 4 s
        clock.step(3.0)
        time.sleep(0.06)
        assert queue.len() == 0
        clock.step(1.0)
        wait_until(lambda: queue.len() == 1, message="one item ready")

        queue.forget("a")
        assert queue.num_requeues("a") == 0
        assert limiter.when("a") == 1.0
    finally:
        queue.shut_down()
