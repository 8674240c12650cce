"""The controller's Prometheus metrics, one bundle per process (or per test).

Every component takes a `ControllerMetrics` (or builds a private one), so tests can use a fresh
`CollectorRegistry` and production exposes one registry on `/metrics`. Metric names follow
client-go where client-go has the concept (rest_client_*, workqueue_* in `workqueue.py`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # REST client
        self.rest_requests = Counter(
            "rest_client_requests",
            "HTTP requests by verb, resource and status code.",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.rest_latency = Histogram(
            "rest_client_request_duration_seconds",
            "HTTP request latency by verb and resource.",
            ["verb", "resource"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.rest_rate_limiter_wait = Histogram(
            "rest_client_rate_limiter_duration_seconds",
            "Time spent waiting for the client-side QPS limit.",
            ["verb"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.rest_retries = Counter(
            "rest_client_retries",
            "Requests retried after a transient error.",
            ["verb", "resource"],
            registry=r,
        )
        # informers
        self.informer_lists = Counter(
            "informer_lists", "Full lists made by reflectors.", ["resource"], registry=r
        )
        self.informer_watches = Counter(
            "informer_watches", "Watches started by reflectors.", ["resource"], registry=r
        )
        self.informer_relists = Counter(
            "informer_relists",
            "Relists after a watch could not resume (410 Gone or error).",
            ["resource", "reason"],
            registry=r,
        )
        self.informer_events = Counter(
            "informer_watch_events", "Watch events received.", ["resource", "type"], registry=r
        )
        self.informer_store_size = Gauge(
            "informer_store_objects", "Objects in an informer's cache.", ["resource"], registry=r
        )
        # reconcilers
        self.reconcile_total = Counter(
            "controller_reconcile",
            "Reconciles by controller and result (success, error, requeue, permanent).",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_reconcile_errors", "Reconciles that raised.", ["controller"], registry=r
        )
        self.reconcile_duration = Histogram(
            "controller_reconcile_duration_seconds",
            "Time spent in one reconcile.",
            ["controller"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_active_workers", "Workers currently reconciling.", ["controller"], registry=r
        )
        # leader election
        self.leader = Gauge(
            "leader_election_master_status", "1 while this process holds the lease.", ["name"], registry=r
        )
        # garbage collector
        self.gc_deletions = Counter(
            "torchrun_gc_deletions", "Orphans deleted by the garbage collector.", ["resource"], registry=r
        )
        self.gc_errors = Counter(
            "torchrun_gc_errors",
            "Objects the garbage collector passed over after an error (the pass went on).",
            ["resource"],
            registry=r,
        )
        # jobs (torchrun_jobs by phase and queue is collected from the cache: torchrunjob/metrics.py)
        self.submit_to_running = Histogram(
            "torchrun_job_submit_to_running_seconds",
            "Time from a job's creation to all its workers running.",
            buckets=(1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
            registry=r,
        )
