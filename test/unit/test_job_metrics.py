"""A job's own series for the alerts (controller/torchrunjob/metrics.py `state_families`, behind
--progress-job-metrics): its conditions, its restarts against the cap in force, and when its
newest complete checkpoint was saved — read from the cache as the job's status says them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from prometheus_client import CollectorRegistry

from controller.cache import Indexer, Lister
from controller.torchrunjob.metrics import ProgressCollector


def job(name: str, status: dict[str, Any], max_restarts: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"jobQueue": "q"}
    if max_restarts is not None:
        spec["failurePolicy"] = {"maxRestarts": max_restarts}
    return {"metadata": {"namespace": "ml", "name": name}, "spec": spec, "status": status}


def samples(restart_limit: int | None, *jobs: dict[str, Any]) -> dict[tuple[str, ...], float]:
    cache = Indexer()
    for j in jobs:
        cache.add(j)
    registry = CollectorRegistry()
    registry.register(ProgressCollector(Lister(cache), restart_limit))
    return {
        (s.name, *(v for k, v in sorted(s.labels.items()) if k != "namespace")): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name.startswith(
            ("torchrun_job_condition", "torchrun_job_restart", "torchrun_job_checkpoint", "torchrun_job_eta")
        )
    }


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()


def test_conditions_restarts_and_the_newest_checkpoint_are_series() -> None:
    stalled = job(
        "stalled",
        {
            "restarts": 4,
            "conditions": [
                {"type": "Running", "status": "True", "reason": "AllWorkersRunning"},
                {"type": "Progressing", "status": "False", "reason": "Stalled", "message": "rank 3"},
            ],
            "checkpoint": {
                "time": "2026-01-02T10:00:00Z",
                "newest": {"name": "s", "time": "2026-01-02T11:30:00Z"},
            },
        },
        max_restarts=5,
    )
    started = job("started", {"checkpoint": {"time": "2026-01-02T10:00:00Z"}})  # no report yet: the start's
    got = samples(None, stalled, started)
    assert got[("torchrun_job_condition", "Running", "stalled", "AllWorkersRunning", "True")] == 1
    assert got[("torchrun_job_condition", "Progressing", "stalled", "Stalled", "False")] == 1
    assert got[("torchrun_job_restarts", "stalled")] == 4
    assert got[("torchrun_job_restart_limit", "stalled")] == 5
    assert got[("torchrun_job_restarts", "started")] == 0
    assert got[("torchrun_job_restart_limit", "started")] == 0  # maxRestarts defaults to 0
    assert got[("torchrun_job_checkpoint_timestamp_seconds", "stalled")] == epoch("2026-01-02T11:30:00Z")
    assert got[("torchrun_job_checkpoint_timestamp_seconds", "started")] == epoch("2026-01-02T10:00:00Z")


def test_the_cap_is_the_controllers_restart_limit_when_lower_and_bad_values_are_left_out() -> None:
    capped = job("capped", {"restarts": 2}, max_restarts=100)
    odd = job("odd", {"conditions": [{"status": "True"}, "junk"], "checkpoint": {"time": "yesterday"}})
    got = samples(3, capped, odd)
    assert got[("torchrun_job_restart_limit", "capped")] == 3
    assert not [k for k in got if k[0] == "torchrun_job_condition"]  # a condition needs its type
    assert ("torchrun_job_checkpoint_timestamp_seconds", "odd") not in got


def test_restarts_by_reason_and_the_eta_are_series() -> None:
    running = job(
        "r",
        {
            "restarts": 3,
            "restartsByReason": {"Stalled": 2, "BackoffLimitExceeded": 1},
            "progress": {"step": 40, "totalSteps": 100, "eta": "2026-01-02T12:00:00Z"},
        },
    )
    got = samples(None, running, job("fresh", {}))
    assert got[("torchrun_job_restarts_by_reason", "r", "Stalled")] == 2
    assert got[("torchrun_job_restarts_by_reason", "r", "BackoffLimitExceeded")] == 1
    assert got[("torchrun_job_eta_timestamp_seconds", "r")] == epoch("2026-01-02T12:00:00Z")
    assert not [
        k
        for k in got
        if k[0] in ("torchrun_job_restarts_by_reason", "torchrun_job_eta_timestamp_seconds")
        and k[1] == "fresh"
    ]
