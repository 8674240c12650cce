"""The autoscaler's Prometheus metrics, registered on the process's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class AutoscalerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.cluster_load = Gauge(
            "torchrun_autoscaler_cluster_load",
            "Requested / allocatable of a GPU resource over the schedulable nodes, at the last pass.",
            ["resource"],
            registry=r,
        )
        self.resizes = Counter(
            "torchrun_autoscaler_resizes",
            "Elastic jobs resized by the autoscaler, by direction (up, down).",
            ["direction"],
            registry=r,
        )
        self.pass_duration = Histogram(
            "torchrun_autoscaler_pass_duration_seconds",
            "Time of one autoscaler pass: snapshot from the caches, plan, writes.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
