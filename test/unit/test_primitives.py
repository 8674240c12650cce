"""Backoff, token bucket, API error predicates and resource paths."""

from __future__ import annotations

import random

import pytest

from controller.backoff import Backoff
from controller.clock import FakeClock
from controller.flowcontrol import TokenBucket
from controller.rest.errors import ApiError, status_error
from controller.rest.resources import JOBS, NODES, PODS


def test_backoff_doubles_caps_and_resets_after_quiet() -> None:
    clock = FakeClock()
    b = Backoff(initial=0.8, maximum=30, reset_after=120, jitter=0, clock=clock)
    assert [b.next() for _ in range(8)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30]
    clock.step(121)
    assert b.next() == 0.8


def test_backoff_jitter_adds_up_to_jitter_times_the_delay_spread_evenly() -> None:
    """Each delay is its un-jittered value d plus a uniform share of `jitter`·d, and the jitter
    never compounds into the doubling: over many backoffs every delay stays in [d, d·(1+jitter)],
    the mean is d·(1+jitter/2), and each tenth of the range gets about a tenth of the samples."""
    clock = FakeClock()
    plain = [b.next() for b in [Backoff(initial=0.5, maximum=10, jitter=0, clock=clock)] for _ in range(7)]
    assert plain == [0.5, 1, 2, 4, 8, 10, 10]
    jitter, rng = 0.6, random.Random(7)
    runs = 2000
    shares = [[] for _ in plain]  # per step: (delay - d) / (jitter·d), in [0, 1]
    for _ in range(runs):
        b = Backoff(initial=0.5, maximum=10, jitter=jitter, clock=clock, rng=rng)
        for step, d in enumerate(plain):
            delay = b.next()
            assert d <= delay <= d * (1 + jitter), (step, delay)
            shares[step].append((delay - d) / (jitter * d))
    for step in shares:
        assert sum(step) / runs == pytest.approx(0.5, abs=0.03)
        tenths = [0] * 10
        for share in step:
            tenths[min(int(share * 10), 9)] += 1
        assert all(abs(count - runs / 10) < runs / 25 for count in tenths), tenths


def test_token_bucket_burst_then_rate() -> None:
    clock = FakeClock()
    tb = TokenBucket(qps=10, burst=3, clock=clock)
    assert [tb.reserve() for _ in range(3)] == [0, 0, 0]
    assert tb.reserve() == pytest.approx(0.1)
    assert tb.reserve() == pytest.approx(0.2)
    clock.step(1.0)
    assert tb.reserve() == 0


def test_api_error_predicates() -> None:
    assert ApiError(404, b'{"reason":"NotFound","message":"x"}').not_found
    assert ApiError(409, {"reason": "AlreadyExists"}).already_exists
    assert ApiError(409, {"reason": "Conflict"}).conflict
    assert not ApiError(409, {"reason": "AlreadyExists"}).conflict
    assert status_error({"code": 410, "reason": "Expired", "message": "too old"}).gone
    assert ApiError(503, b"oops").transient and ApiError(429, b"").transient
    assert not ApiError(400, b"").transient
    assert ApiError(500, b"not json").message == "not json"


def test_resource_paths() -> None:
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert JOBS.path() == "/apis/batch/v1/jobs"
    assert NODES.path("ignored", "n1") == "/api/v1/nodes/n1"
    assert JOBS.key == "jobs.batch" and PODS.api_version == "v1"
