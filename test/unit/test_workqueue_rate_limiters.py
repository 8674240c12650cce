"""Rate limiter arithmetic: exponential, fast/slow, token bucket, max-of, and the defaults."""

from __future__ import annotations

from collections.abc import Hashable

import pytest

from controller.clock import FakeClock
from controller.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
    default_item_based_rate_limiter,
)


def test_exponential_doubles_per_failure_from_the_base() -> None:
    limiter = ItemExponentialFailureRateLimiter[str]()  # client-go's controller default: 5 ms

    delays = [limiter.when("a") for _ in range(5)]

    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert limiter.num_requeues("a") == 5


def test_exponential_tracks_each_item_separately_and_forget_resets() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](0.001, 1.0)
    limiter.when("a")
    limiter.when("a")

    assert limiter.when("b") == pytest.approx(0.001)
    assert limiter.num_requeues("a") == 2

    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.001)
    assert limiter.num_requeues("b") == 1


def test_exponential_is_capped_at_the_maximum() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](1.0, 10.0)

    assert [limiter.when("a") for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_exponential_never_overflows() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](0.005, 1000.0)

    delays = [limiter.when("a") for _ in range(1100)]  # 0.005 * 2**1099 is beyond a float

    assert delays[-1] == 1000.0
    assert max(delays) == 1000.0
    assert limiter.num_requeues("a") == 1100


def test_fast_slow_is_fast_for_the_first_attempts_then_slow() -> None:
    limiter = ItemFastSlowRateLimiter[str](0.005, 10.0, 3)

    assert [limiter.when("a") for _ in range(5)] == [0.005, 0.005, 0.005, 10.0, 10.0]
    assert limiter.num_requeues("a") == 5
    assert limiter.when("b") == 0.005

    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == 0.005


def test_bucket_allows_a_burst_then_spaces_retries_by_one_over_qps() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(qps=10.0, burst=3, clock=clock)

    delays = [limiter.when(f"item-{i}") for i in range(6)]

    assert delays == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2, 0.3])
    assert limiter.num_requeues("item-0") == 0


def test_bucket_refills_with_time_up_to_the_burst() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(qps=10.0, burst=2, clock=clock)
    limiter.when("a")
    limiter.when("a")
    assert limiter.when("a") == pytest.approx(0.1)  # one token in debt

    clock.step(0.2)  # pays the debt and refills one token
    assert limiter.when("a") == 0.0
    assert limiter.when("a") == pytest.approx(0.1)

    clock.step(60.0)  # refills only up to the burst
    assert [limiter.when("a") for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])

    limiter.forget("a")  # the bucket is not per item: nothing to forget
    assert limiter.when("a") == pytest.approx(0.2)


def test_max_of_takes_the_longest_delay_and_the_most_requeues() -> None:
    limiter = MaxOfRateLimiter[str](
        ItemFastSlowRateLimiter[str](0.005, 3.0, 3),
        ItemExponentialFailureRateLimiter[str](0.001, 1.0),
    )

    delays = [limiter.when("a") for _ in range(5)]

    assert delays == pytest.approx([0.005, 0.005, 0.005, 3.0, 3.0])
    assert limiter.num_requeues("a") == 5

    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)


def test_max_of_records_the_failure_in_every_limiter() -> None:
    slow = ItemFastSlowRateLimiter[str](10.0, 10.0, 1)
    exponential = ItemExponentialFailureRateLimiter[str](0.001, 1.0)
    limiter = MaxOfRateLimiter[str](slow, exponential)

    limiter.when("a")
    limiter.when("a")

    assert exponential.num_requeues("a") == 2
    assert exponential.when("a") == pytest.approx(0.004)


def test_max_of_needs_a_limiter() -> None:
    with pytest.raises(ValueError):
        MaxOfRateLimiter[str]()


def test_default_controller_limiter_is_per_item_backoff_under_an_overall_bucket() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock)

    first_failures = [limiter.when(i) for i in range(100)]  # the burst of 100 tokens
    assert first_failures == pytest.approx([0.005] * 100)

    # the bucket is empty: 10 qps now dominates the 5 ms backoff of a new item
    assert limiter.when(100) == pytest.approx(0.1)
    # per-item backoff still grows and dominates once it exceeds the bucket's wait
    clock.step(100.0)
    delays = [limiter.when(0) for _ in range(12)]
    assert delays[0] == pytest.approx(0.01)
    assert delays[-1] == pytest.approx(0.005 * 2**12)
    assert limiter.num_requeues(0) == 13


def test_default_item_based_limiter_starts_at_one_millisecond() -> None:
    limiter = default_item_based_rate_limiter()
    key: Hashable = "a"

    assert [limiter.when(key) for _ in range(3)] == pytest.approx([0.001, 0.002, 0.004])
