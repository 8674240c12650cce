"""The basic work queue: FIFO, dedup, one worker per item, deferred re-adds, shutdown."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from testbed import wait_until

from controller.workqueue import ItemExponentialFailureRateLimiter, Queue, RateLimitingQueue

pytestmark = pytest.mark.timeout(60)

# how long to watch a thread to see that it stays blocked
BLOCKED = 0.05


class Getter:
    """Calls `queue.get()` on a thread and keeps the result."""

    def __init__(self, queue: Queue[str]) -> None:
        self.result: tuple[str | None, bool] | None = None
        self._thread = threading.Thread(target=self._run, args=(queue,), daemon=True)
        self._thread.start()

    def _run(self, queue: Queue[str]) -> None:
        self.result = queue.get()

    def blocked(self) -> bool:
        self._thread.join(BLOCKED)
        return self._thread.is_alive()

    def wait(self) -> tuple[str | None, bool] | None:
        self._thread.join(5.0)
        return self.result


@pytest.fixture
def queue() -> Iterator[Queue[str]]:
    q: Queue[str] = Queue()
    yield q
    q.shut_down()


def take(queue: Queue[str]) -> str:
    """Get an item that must be ready (so a broken queue fails the test instead of hanging it)."""
    assert queue.len() > 0
    item, shutdown = queue.get()
    assert not shutdown
    assert item is not None
    return item


def test_items_come_out_in_the_order_they_were_added(queue: Queue[str]) -> None:
    for item in "abc":
        queue.add(item)

    assert len(queue) == 3
    assert [take(queue) for _ in range(3)] == ["a", "b", "c"]
    assert queue.len() == 0


def test_an_item_added_twice_before_processing_is_handed_out_once(queue: Queue[str]) -> None:
    queue.add("a")
    queue.add("b")
    queue.add("a")

    assert len(queue) == 2
    assert take(queue) == "a"
    assert take(queue) == "b"
    assert len(queue) == 0


def test_a_re_add_while_processing_waits_for_done(queue: Queue[str]) -> None:
    queue.add("a")
    assert take(queue) == "a"

    queue.add("a")
    queue.add("a")
    assert len(queue) == 0  # not available while its worker still holds it

    queue.done("a")
    assert len(queue) == 1
    assert take(queue) == "a"
    queue.done("a")
    assert len(queue) == 0


def test_a_second_worker_does_not_get_an_item_being_processed(queue: Queue[str]) -> None:
    queue.add("a")
    assert take(queue) == "a"
    queue.add("a")

    second = Getter(queue)
    assert second.blocked()

    queue.done("a")
    assert second.wait() == ("a", False)


def test_a_re_added_item_keeps_its_place_behind_items_added_before_done(queue: Queue[str]) -> None:
    queue.add("a")
    assert take(queue) == "a"
    queue.add("a")
    queue.add("b")

    queue.done("a")

    assert [take(queue), take(queue)] == ["b", "a"]


def test_get_blocks_until_an_item_is_added(queue: Queue[str]) -> None:
    getter = Getter(queue)
    assert getter.blocked()

    queue.add("a")

    assert getter.wait() == ("a", False)


def test_done_for_an_item_not_being_processed_is_harmless(queue: Queue[str]) -> None:
    queue.done("never-added")
    queue.add("a")
    queue.done("a")  # queued, not handed out: must not be queued a second time

    assert len(queue) == 1
    assert take(queue) == "a"
    assert len(queue) == 0


def test_shut_down_wakes_every_blocked_getter(queue: Queue[str]) -> None:
    getters = [Getter(queue) for _ in range(3)]
    assert all(g.blocked() for g in getters)

    queue.shut_down()

    assert [g.wait() for g in getters] == [(None, True)] * 3
    assert queue.shutting_down()


def test_after_shut_down_adds_are_ignored_and_queued_items_still_drain(queue: Queue[str]) -> None:
    queue.add("a")
    queue.add("b")
    queue.shut_down()
    queue.add("c")

    assert take(queue) == "a"
    assert take(queue) == "b"
    assert queue.get() == (None, True)
    assert queue.get() == (None, True)


def test_an_item_re_added_before_shut_down_is_handed_out_after_done(queue: Queue[str]) -> None:
    queue.add("a")
    assert take(queue) == "a"
    queue.add("a")
    queue.shut_down()

    queue.done("a")

    assert take(queue) == "a"
    assert queue.get() == (None, True)


def test_shut_down_with_drain_waits_for_items_being_processed(queue: Queue[str]) -> None:
    queue.add("a")
    queue.add("b")
    assert take(queue) == "a"
    drained = threading.Event()

    def drain() -> None:
        queue.shut_down_with_drain()
        drained.set()

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    drainer.join(BLOCKED)
    assert not drained.is_set()

    assert take(queue) == "b"  # still handed out while draining
    queue.done("a")
    drainer.join(BLOCKED)
    assert not drained.is_set()  # "b" is still being processed

    queue.done("b")
    drainer.join(5.0)
    assert drained.is_set()
    assert queue.get() == (None, True)


def test_shut_down_with_drain_ends_when_the_last_item_is_done_even_if_re_added(queue: Queue[str]) -> None:
    queue.add("a")
    assert take(queue) == "a"
    queue.add("a")
    drainer = threading.Thread(target=queue.shut_down_with_drain, daemon=True)
    drainer.start()
    drainer.join(BLOCKED)
    assert drainer.is_alive()

    queue.done("a")

    drainer.join(5.0)
    assert not drainer.is_alive()
    assert take(queue) == "a"  # the re-add made before shutdown is still handed out


def test_shut_down_with_drain_returns_at_once_when_nothing_is_processing(queue: Queue[str]) -> None:
    queue.add("a")
    queue.shut_down_with_drain()
    assert queue.shutting_down()
    assert take(queue) == "a"


def test_shut_down_releases_a_waiting_drain(queue: Queue[str]) -> None:
    queue.add("a")
    assert take(queue) == "a"
    drainer = threading.Thread(target=queue.shut_down_with_drain, daemon=True)
    drainer.start()
    drainer.join(BLOCKED)
    assert drainer.is_alive()

    queue.shut_down()

    drainer.join(5.0)
    assert not drainer.is_alive()


class _StressLedger:
    """What the stress test's workers saw, kept under one lock.

    Producers bump a key's version before adding it; a worker reads the version when it starts on
    the key, like a level-based reconcile reads the latest object. If no add is lost, the last
    processing of each key saw its final version.
    """

    def __init__(self, keys: int) -> None:
        self.lock = threading.Lock()
        self.version = [0] * keys
        self.seen = [0] * keys
        self.processed = [0] * keys
        self.in_flight: set[int] = set()
        self.overlaps: list[int] = []

    def bump(self, key: int) -> None:
        with self.lock:
            self.version[key] += 1

    def start(self, key: int) -> None:
        with self.lock:
            if key in self.in_flight:
                self.overlaps.append(key)
            self.in_flight.add(key)
            self.seen[key] = self.version[key]
            self.processed[key] += 1

    def finish(self, key: int) -> None:
        with self.lock:
            self.in_flight.discard(key)

    def caught_up(self) -> bool:
        with self.lock:
            return self.seen == self.version


Enqueue = Callable[[int, random.Random], None]


def _plain_queue() -> tuple[Queue[int], Enqueue]:
    queue: Queue[int] = Queue()
    return queue, lambda key, rng: queue.add(key)


def _rate_limited_queue() -> tuple[Queue[int], Enqueue]:
    """A real-clock rate-limited queue fed by add, add_after and add_rate_limited at random."""
    queue = RateLimitingQueue[int](ItemExponentialFailureRateLimiter[int](0.0001, 0.002))

    def enqueue(key: int, rng: random.Random) -> None:
        how = rng.randrange(3)
        if how == 0:
            queue.add(key)
        elif how == 1:
            queue.add_after(key, rng.random() * 0.002)
        else:
            queue.add_rate_limited(key)

    return queue, enqueue


@pytest.mark.parametrize("make", [_plain_queue, _rate_limited_queue], ids=["queue", "rate-limiting"])
def test_stress_no_item_is_processed_twice_at_once_and_no_add_is_lost(
    make: Callable[[], tuple[Queue[int], Enqueue]],
) -> None:
    keys, producers, consumers, adds_each = 64, 10, 10, 1500
    queue, enqueue = make()
    ledger = _StressLedger(keys)

    def produce(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(adds_each):
            key = rng.randrange(keys)
            ledger.bump(key)
            enqueue(key, rng)

    def consume(seed: int) -> None:
        rng = random.Random(seed)
        while True:
            key, shutdown = queue.get()
            if shutdown or key is None:
                return
            ledger.start(key)
            if rng.random() < 0.2:
                time.sleep(0)  # give other threads a chance to add or get this key meanwhile
            ledger.finish(key)
            if isinstance(queue, RateLimitingQueue):
                queue.forget(key)
            queue.done(key)

    threads = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(producers)]
    threads += [threading.Thread(target=consume, args=(100 + i,), daemon=True) for i in range(consumers)]
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # many more thread switches inside the queue's critical paths
    try:
        for t in threads:
            t.start()
        for t in threads[:producers]:
            t.join(30)
        wait_until(ledger.caught_up, 30, message="every key processed after its last add")
        queue.shut_down()
        for t in threads:
            t.join(30)
    finally:
        sys.setswitchinterval(switch_interval)

    assert not any(t.is_alive() for t in threads)
    assert ledger.overlaps == []
    assert ledger.seen == ledger.version
    assert all(count > 0 for count, v in zip(ledger.processed, ledger.version, strict=True) if v)
    assert sum(ledger.processed) <= producers * adds_each  # dedup never invents work
    assert len(queue) == 0
