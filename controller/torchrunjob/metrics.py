"""`torchrun_jobs{phase,queue}` (TorchrunJobs by phase and queue) and, optionally,
`torchrun_job_progress_percent{namespace,job}`: read from the informer cache at scrape time —
always current, and no bookkeeping on the reconcile path."""

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
    has one (behind --progress-job-metrics: a series per job is a cardinality to choose)."""

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
