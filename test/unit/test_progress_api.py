"""The progress API: numbers in status (floats and the metrics map) parse and print back, bad
ones are named; the job's stall policy falls back to its queue's field by field; the optional
per-job metric."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from controller.api import InvalidObjectError, from_json, to_json
from controller.api.progress import EffectivePolicy, OnStall, Progress, ProgressPolicy, effective
from controller.cache import Indexer, Lister
from controller.torchrunjob.metrics import ProgressCollector


def test_progress_round_trips_with_floats_and_metrics() -> None:
    raw = {
        "step": 1200,
        "totalSteps": 50000,
        "epoch": 3,
        "percent": 2,
        "samplesPerSecond": 812.5,
        "metrics": {"loss": 1.84, "lr": 3},
        "updateTime": "2026-01-01T00:00:00Z",
        "summary": "2%",
        "rank": 0,
    }
    progress = from_json(Progress, raw)
    assert progress.epoch == 3.0 and progress.metrics == {"loss": 1.84, "lr": 3.0}
    assert to_json(progress) == {**raw, "epoch": 3.0, "metrics": {"loss": 1.84, "lr": 3.0}}


@pytest.mark.parametrize(
    ("raw", "path", "message"),
    [
        ({"epoch": "3"}, "epoch", "must be a number, not string"),
        ({"epoch": True}, "epoch", "must be a number, not boolean"),
        ({"metrics": {"loss": "x"}}, "metrics", "values must be numbers"),
        ({"metrics": {"loss": False}}, "metrics", "values must be numbers"),
    ],
)
def test_bad_numbers_are_named(raw: dict[str, object], path: str, message: str) -> None:
    with pytest.raises(InvalidObjectError) as err:
        from_json(Progress, raw)
    assert path in str(err.value) and message in str(err.value)


@pytest.mark.parametrize(
    ("job", "queue", "expected"),
    [
        (None, None, EffectivePolicy(None, OnStall.NONE)),
        (None, ProgressPolicy(600, OnStall.RESTART), EffectivePolicy(600, OnStall.RESTART)),
        (ProgressPolicy(60), ProgressPolicy(600, OnStall.RESTART), EffectivePolicy(60, OnStall.RESTART)),
        (
            ProgressPolicy(on_stall=OnStall.NONE),
            ProgressPolicy(600, OnStall.RESTART),
            EffectivePolicy(600, OnStall.NONE),
        ),
        (ProgressPolicy(60, OnStall.RESTART), None, EffectivePolicy(60, OnStall.RESTART)),
    ],
)
def test_the_job_policy_falls_back_to_the_queue_field_by_field(
    job: ProgressPolicy | None, queue: ProgressPolicy | None, expected: EffectivePolicy
) -> None:
    assert effective(job, queue) == expected


def test_the_optional_job_metric_is_each_reporting_jobs_percent() -> None:
    jobs = Indexer()
    jobs.add({"metadata": {"namespace": "ns", "name": "a"}, "status": {"progress": {"percent": 42}}})
    jobs.add({"metadata": {"namespace": "ns", "name": "b"}, "status": {"progress": {"step": 7}}})
    jobs.add({"metadata": {"namespace": "ns", "name": "c"}, "status": {}})
    registry = CollectorRegistry()
    registry.register(ProgressCollector(Lister(jobs)))
    samples = [
        (s.name, s.labels, s.value)
        for f in registry.collect()
        for s in f.samples
        if s.name == "torchrun_job_progress_percent"
    ]
    assert samples == [("torchrun_job_progress_percent", {"namespace": "ns", "job": "a"}, 42.0)]
