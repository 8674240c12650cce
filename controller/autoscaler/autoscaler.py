"""Autoscaler: every `period` seconds, on the leader only, plan and apply size changes of elastic
TorchrunJobs (the seed's `Run(threadiness, maxLoadDesired, ...)` autoscaler; SPEC §6).

Nothing runs until a job the autoscaler may resize exists (`has_work`); then its cluster-wide caches
start (`wiring.py`) and a pass runs every period. A pass reads the informer caches only (nodes,
pods, TorchrunJobs, TorchrunQueues: no API reads), builds the snapshot (`snapshot.py`), exports the
GPU load, plans (`planner.py`) and applies each change as a merge patch of the job's
`status.desiredNodes` carrying the cached resourceVersion: if the job changed since the snapshot the
patch is refused (409) and the next pass plans again from fresh state, so a decision is never
applied to a job it was not made for. The TorchrunJob reconciler then moves the worker Job's
parallelism to it (torchrunjob/elastic.py). Each applied change is an Event on the job
(`ScaledUp`/`ScaledDown`: `2→3 nodes, cluster GPU load 0.62 → 0.75`, and why — the reasons are
`api.reasons.AutoscalerReason`), a log line and `torchrun_autoscaler_resizes_total{direction}`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from controller.api.reasons import AutoscalerReason
from controller.api.resources import TORCHRUNJOBS
from controller.autoscaler.metrics import AutoscalerMetrics
from controller.autoscaler.model import Resize
from controller.autoscaler.planner import cluster_load, plan
from controller.autoscaler.snapshot import build_snapshot, elastic_candidate, queue_settings
from controller.cache import Lister
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.runtime.events import NORMAL, EventRecorder

log = structlog.get_logger("autoscaler")


def resize_message(change: Resize, max_load: float) -> str:
    """`2→3 nodes, cluster GPU load 0.62 → 0.75`, then why."""
    target = f"{max_load:.2f} target"
    why = {
        AutoscalerReason.FREE_CAPACITY: f"room for a node on {change.node}, load stays within the {target}",
        AutoscalerReason.LOAD_ABOVE_TARGET: f"load above the {target}",
        AutoscalerReason.PENDING_WORK: "making room for work waiting as Unschedulable",
        AutoscalerReason.OWN_PODS_UNSCHEDULABLE: "its own pods cannot be scheduled",
    }.get(change.reason, change.reason)
    return (
        f"{change.from_nodes}→{change.to_nodes} nodes, cluster GPU load "
        f"{change.load_before:.2f} → {change.load_after:.2f} ({change.resource}; {why})"
    )


class Autoscaler:
    def __init__(
        self,
        client: RESTClient,
        *,
        nodes: Lister,
        pods: Lister,
        jobs: Lister,
        queues: Lister,
        recorder: EventRecorder,
        max_load: float,
        period: float,
        metrics: AutoscalerMetrics,
        before_first_pass: Callable[[threading.Event], bool] | None = None,
    ) -> None:
        self.client = client
        self.nodes = nodes
        self.pods = pods
        self.jobs = jobs
        self.queues = queues
        self.recorder = recorder
        self.max_load = max_load
        self.period = period
        self.metrics = metrics
        self.before_first_pass = before_first_pass
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._loop, args=(stop,), name="autoscaler", daemon=True)
        self._thread.start()

    def _loop(self, stop: threading.Event) -> None:
        while not self.has_work():  # no elastic job to resize: no cluster-wide caches, no pass
            if stop.wait(self.period):
                return
        if self.before_first_pass is not None and not self.before_first_pass(stop):
            log.error("autoscaler caches did not sync; the autoscaler is not running")
            return
        log.info("autoscaler started: an elastic job may be resized")
        while not stop.wait(self.period):
            try:
                self.run_once()
            except Exception:
                log.exception("autoscaler pass failed")

    def has_work(self) -> bool:
        """Some job is elastic on a queue the autoscaler may resize on (`snapshot.candidate`'s
        spec rules; its state is the pass's to judge)."""
        queues = queue_settings(self.queues.list())
        return any(elastic_candidate(job, queues) for job in self.jobs.list())

    def run_once(self) -> list[Resize]:
        """One pass; returns the changes applied."""
        started = time.monotonic()
        snapshot = build_snapshot(self.nodes.list(), self.pods.list(), self.jobs.list(), self.queues.list())
        for resource, load in cluster_load(snapshot).items():
            self.metrics.cluster_load.labels(resource).set(load)
        applied = [change for change in plan(snapshot, self.max_load) if self.apply(change)]
        self.metrics.pass_duration.observe(time.monotonic() - started)
        return applied

    def apply(self, change: Resize) -> bool:
        namespace, _, name = change.key.partition("/")
        raw = self.jobs.get(name, namespace)
        if raw is None:
            return False
        patch = {
            "metadata": {"resourceVersion": raw["metadata"]["resourceVersion"]},
            "status": {"desiredNodes": change.to_nodes},
        }
        try:
            self.client.patch(TORCHRUNJOBS, name, patch, namespace, subresource="status")
        except ApiError as exc:
            if exc.conflict or exc.not_found:
                log.info("resize skipped: the job changed since the snapshot", key=change.key)
                return False
            raise
        message = resize_message(change, self.max_load)
        reason = AutoscalerReason.SCALED_UP if change.direction == "up" else AutoscalerReason.SCALED_DOWN
        self.recorder.event(raw, NORMAL, reason, message)
        self.metrics.resizes.labels(change.direction).inc()
        log.info(
            "resized",
            key=change.key,
            nodes=f"{change.from_nodes}->{change.to_nodes}",
            reason=str(change.reason),
            load_before=round(change.load_before, 4),
            load_after=round(change.load_after, 4),
        )
        return True
