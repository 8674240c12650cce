"""Throughput of the work queues: add→get→done cycles per second.

    python hack/bench/bench_workqueue.py [--items N] [--repeat R]

"1 thread" runs add, get, done in turn on one thread. "10 threads" runs 5 producers adding
distinct items and 5 consumers doing get/done until the queue is shut down and drained; the
rate counts items fully processed. The best of `--repeat` runs is reported. Never a test.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from functools import partial

from prometheus_client import CollectorRegistry

from controller.metrics.workqueue import PrometheusWorkqueueMetricsProvider
from controller.workqueue import (
    Queue,
    RateLimitingQueue,
    default_controller_rate_limiter,
)

QueueFactory = Callable[[], Queue[int]]


def single_thread(make: QueueFactory, items: int) -> float:
    q = make()
    add, get, done = q.add, q.get, q.done
    start = time.perf_counter()
    for i in range(items):
        add(i)
        item, _ = get()
        done(item)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - start
    q.shut_down()
    return items / elapsed


def multi_thread(make: QueueFactory, items: int, producers: int = 5, consumers: int = 5) -> float:
    q = make()
    processed = [0] * consumers

    def produce(first: int) -> None:
        for i in range(first, items, producers):
            q.add(i)

    def consume(slot: int) -> None:
        count = 0
        while True:
            item, shutdown = q.get()
            if shutdown:
                break
            q.done(item)  # type: ignore[arg-type]
            count += 1
        processed[slot] = count

    producer_threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    consumer_threads = [threading.Thread(target=consume, args=(c,)) for c in range(consumers)]
    start = time.perf_counter()
    for t in consumer_threads + producer_threads:
        t.start()
    for t in producer_threads:
        t.join()
    q.shut_down()
    for t in consumer_threads:
        t.join()
    elapsed = time.perf_counter() - start
    assert sum(processed) == items, (sum(processed), items)
    return items / elapsed


def variants() -> dict[str, QueueFactory]:
    def prometheus_queue() -> Queue[int]:
        provider = PrometheusWorkqueueMetricsProvider(CollectorRegistry())
        return Queue("bench", metrics_provider=provider)

    return {
        "Queue (unnamed)": Queue[int],
        "Queue (named, no-op metrics)": lambda: Queue[int]("bench"),
        "Queue (named, prometheus)": prometheus_queue,
        "RateLimitingQueue (unnamed)": lambda: RateLimitingQueue[int](default_controller_rate_limiter()),
    }


def best_of(repeat: int, run: Callable[[], float]) -> float:
    return max(run() for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=200_000, help="items per run (default 200000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell, best reported (default 3)")
    args = parser.parse_args()

    header = f"{'queue':<30} {'1 thread':>14} {'10 threads':>14}"
    print(f"add→get→done cycles/s, {args.items} items, best of {args.repeat}")
    print(header)
    print("-" * len(header))
    for label, make in variants().items():
        one = best_of(args.repeat, partial(single_thread, make, args.items))
        ten = best_of(args.repeat, partial(multi_thread, make, args.items))
        print(f"{label:<30} {one:>14,.0f} {ten:>14,.0f}")


if __name__ == "__main__":
    main()
