"""Prometheus metrics of work queues, under client-go's names (k8s.io/component-base's
`metrics/prometheus/workqueue`), labelled by the queue's `name`.

`PrometheusWorkqueueMetricsProvider` satisfies `controller.workqueue.MetricsProvider`
structurally: this module sits below the workqueue layer and does not import it. Each provider
registers its seven metric families once in the registry it is given; queues sharing a name
share series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

DURATION_BUCKETS = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
"""client-go's `ExponentialBuckets(10e-9, 10, 10)`."""


class PrometheusWorkqueueMetricsProvider:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        labels = ["name"]
        self._depth = Gauge("workqueue_depth", "Current depth of workqueue", labels, registry=registry)
        self._adds = Counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", labels, registry=registry
        )
        self._latency = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            labels,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            labels,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._unfinished_work_seconds = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has done that is in progress and hasn't been observed by "
            "work_duration. Large values indicate stuck threads. One can deduce the number of "
            "stuck threads by observing the rate at which this increases.",
            labels,
            registry=registry,
        )
        self._longest_running_processor = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels,
            registry=registry,
        )
        self._retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            labels,
            registry=registry,
        )

    def new_depth_metric(self, name: str) -> Gauge:
        return self._depth.labels(name=name)

    def new_adds_metric(self, name: str) -> Counter:
        return self._adds.labels(name=name)

    def new_latency_metric(self, name: str) -> Histogram:
        return self._latency.labels(name=name)

    def new_work_duration_metric(self, name: str) -> Histogram:
        return self._work_duration.labels(name=name)

    def new_unfinished_work_seconds_metric(self, name: str) -> Gauge:
        return self._unfinished_work_seconds.labels(name=name)

    def new_longest_running_processor_seconds_metric(self, name: str) -> Gauge:
        return self._longest_running_processor.labels(name=name)

    def new_retries_metric(self, name: str) -> Counter:
        return self._retries.labels(name=name)
