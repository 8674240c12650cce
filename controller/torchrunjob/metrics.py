"""`torchrun_jobs{phase,queue}` (TorchrunJobs by phase and queue) and, optionally,
`torchrun_job_progress_percent{namespace,job}`, `torchrun_job_goodput_ratio{namespace,job}` and
`torchrun_job_goodput_seconds{namespace,job,cause}` (`status.goodput`): read from the informer
cache at scrape time — always current, and no bookkeeping on the reconcile path."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controller.cache import Lister


class JobsCollector(Collector):
    def __init__(self, jobs: Lister) -> None:
        self.jobs = jobs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "torchrun_jobs", "TorchrunJobs by phase and queue.", labels=["phase", "queue"]
        )
        counts: Counter[tuple[str, str]] = Counter()
        for job in self.jobs.list():
            phase = (job.get("status") or {}).get("phase") or "Pending"
            counts[(phase, (job.get("spec") or {}).get("jobQueue") or "")] += 1
        for (phase, queue), n in sorted(counts.items()):
            family.add_metric([phase, queue], n)
        yield family


class ProgressCollector(Collector):
    """`torchrun_job_progress_percent{namespace,job}`: status.progress.percent of each job that
    has one, and each job's `status.goodput` — its fraction and its seconds by cause (`good` and
    the five causes of `GoodputSeconds`: a bounded set) — behind --progress-job-metrics: a series
    per job is a cardinality to choose."""

    def __init__(self, jobs: Lister) -> None:
        self.jobs = jobs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "torchrun_job_progress_percent",
            "Percent of totalSteps reached, as in status.progress.",
            labels=["namespace", "job"],
        )
        for job in self.jobs.list():
            percent = ((job.get("status") or {}).get("progress") or {}).get("percent")
            if isinstance(percent, int):
                meta = job["metadata"]
                family.add_metric([meta.get("namespace", ""), meta["name"]], percent)
        yield family
        yield from goodput_families(self.jobs)


def goodput_families(jobs: Lister) -> Iterator[GaugeMetricFamily]:
    """Each job's status.goodput: the fraction of its counted wall time that was good, and the
    seconds by cause."""
    ratio = GaugeMetricFamily(
        "torchrun_job_goodput_ratio",
        "Fraction of the wall time since admission that advanced training for good (status.goodput).",
        labels=["namespace", "job"],
    )
    seconds = GaugeMetricFamily(
        "torchrun_job_goodput_seconds",
        "Wall time since admission by what it went to: good, or the cause of the loss.",
        labels=["namespace", "job", "cause"],
    )
    for job in jobs.list():
        ledger = (job.get("status") or {}).get("goodput") or {}
        by_cause = ledger.get("seconds") or {}
        total = sum(v for v in by_cause.values() if isinstance(v, (int, float)))
        if total <= 0:
            continue
        labels = [job["metadata"].get("namespace", ""), job["metadata"]["name"]]
        ratio.add_metric(labels, float(by_cause.get("good") or 0) / total)
        for cause, value in sorted(by_cause.items()):
            if isinstance(value, (int, float)):
                seconds.add_metric([*labels, cause], value)
    yield ratio
    yield seconds
