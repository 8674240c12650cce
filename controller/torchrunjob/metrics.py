"""`torchrun_jobs{phase,queue}` (TorchrunJobs by phase and queue) and, optionally, a job's own
series: `torchrun_job_progress_percent{namespace,job}`, `torchrun_job_goodput_ratio{namespace,job}`
and `torchrun_job_goodput_seconds{namespace,job,cause}` (`status.goodput`), and its state for the
alerts (config/prometheus/rules.yaml): `torchrun_job_condition{namespace,job,condition,status,
reason}` (1 per condition, as kube-state-metrics shows a pod's), `torchrun_job_restarts`,
`torchrun_job_restarts_by_reason{reason}` and `torchrun_job_restart_limit` (the cap in force:
failurePolicy.maxRestarts within --restart-limit), `torchrun_job_eta_timestamp_seconds`
(status.progress.eta), `torchrun_job_workspace_bytes` (status.workspaceBytes) and
`torchrun_job_checkpoint_timestamp_seconds` (when the newest complete checkpoint known was saved).
All read from the informer cache at scrape time — as current as the cache (a status the
controller just wrote counts once its watch event arrives), and no bookkeeping on the reconcile
path."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

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

    def __init__(self, jobs: Lister, restart_limit: int | None = None) -> None:
        self.jobs = jobs
        self.restart_limit = restart_limit  # --restart-limit: caps every job's maxRestarts

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
        yield from state_families(self.jobs, self.restart_limit)


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


def _labels(job: Mapping[str, Any]) -> list[str]:
    return [job["metadata"].get("namespace", ""), job["metadata"]["name"]]


def _epoch(text: object) -> float | None:
    """An RFC 3339 time of the API as seconds since the epoch, or None."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def state_families(jobs: Lister, restart_limit: int | None) -> Iterator[GaugeMetricFamily]:
    """Each job's conditions, restarts against their cap, and newest checkpoint's time (module
    doc): what the alerts on a job read."""
    conditions = GaugeMetricFamily(
        "torchrun_job_condition",
        "1 for each condition a TorchrunJob has, with its status and reason.",
        labels=["namespace", "job", "condition", "status", "reason"],
    )
    restarts = GaugeMetricFamily(
        "torchrun_job_restarts", "Whole-job restarts so far (status.restarts).", labels=["namespace", "job"]
    )
    limit = GaugeMetricFamily(
        "torchrun_job_restart_limit",
        "Whole-job restarts allowed: failurePolicy.maxRestarts, within --restart-limit.",
        labels=["namespace", "job"],
    )
    by_reason = GaugeMetricFamily(
        "torchrun_job_restarts_by_reason",
        "Whole-job restarts so far by the reason the attempt ended (status.restartsByReason).",
        labels=["namespace", "job", "reason"],
    )
    eta = GaugeMetricFamily(
        "torchrun_job_eta_timestamp_seconds",
        "When totalSteps will be reached at the recent rate of steps (status.progress.eta).",
        labels=["namespace", "job"],
    )
    workspace = GaugeMetricFamily(
        "torchrun_job_workspace_bytes",
        "Bytes of the files of the workspace generation in use, unpacked (status.workspaceBytes: "
        "what the sync program counted of the upload, or of the git, s3 or pvc source).",
        labels=["namespace", "job"],
    )
    checkpoint = GaugeMetricFamily(
        "torchrun_job_checkpoint_timestamp_seconds",
        "When the newest complete checkpoint known (status.checkpoint.newest, else the one found at "
        "the attempt's start) was saved.",
        labels=["namespace", "job"],
    )
    for job in jobs.list():
        labels, status = _labels(job), job.get("status") or {}
        for cond in status.get("conditions") or ():
            if isinstance(cond, Mapping) and cond.get("type"):
                keys = (str(cond["type"]), str(cond.get("status", "")), str(cond.get("reason", "")))
                conditions.add_metric([*labels, *keys], 1)
        restarts.add_metric(labels, int(status.get("restarts") or 0))
        for reason, count in sorted((status.get("restartsByReason") or {}).items()):
            if isinstance(count, int):
                by_reason.add_metric([*labels, str(reason)], count)
        size = status.get("workspaceBytes")
        if isinstance(size, int):
            workspace.add_metric(labels, size)
        finish = _epoch((status.get("progress") or {}).get("eta"))
        if finish is not None:
            eta.add_metric(labels, finish)
        cap = int(((job.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts") or 0)
        limit.add_metric(labels, cap if restart_limit is None else min(cap, restart_limit))
        saved = status.get("checkpoint") or {}
        when = _epoch((saved.get("newest") or {}).get("time")) or _epoch(saved.get("time"))
        if when is not None:
            checkpoint.add_metric(labels, when)
    yield conditions
    yield restarts
    yield by_reason
    yield limit
    yield eta
    yield workspace
    yield checkpoint
