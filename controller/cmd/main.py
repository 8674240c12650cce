"""`torchrun-controller`: wire informers, workqueues, reconcilers, GC, metrics and leader election.

Start-up: serve /healthz, /readyz and /metrics at once; then (after winning the Lease, with
--leader-elect) start the informers, wait for their caches, and start the workers and the
garbage collector. SIGTERM/SIGINT drain the workqueues, stop the informers, release the Lease
and exit 0. Losing the Lease exits 1 so the Deployment restarts the process as a candidate.
"""

from __future__ import annotations

import faulthandler
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from controller import log as logconf
from controller.api.resources import TORCHRUNJOBS, TORCHRUNQUEUES
from controller.cache import DeletedFinalStateUnknown, SharedInformerFactory
from controller.cache.informer import FuncHandler
from controller.cache.transforms import slim_pod
from controller.cmd.options import ControllerOptions, parse
from controller.gc import GarbageCollector
from controller.leaderelection import LeaderElectionConfig, LeaderElector
from controller.metrics.registry import ControllerMetrics
from controller.metrics.server import MetricsServer
from controller.metrics.workqueue import PrometheusWorkqueueMetricsProvider
from controller.rest import RESTClient, load_config
from controller.rest.config import current_namespace
from controller.rest.resources import JOBS, PODS, PVCS, SERVICES
from controller.runtime import Controller
from controller.runtime.events import EventRecorder
from controller.torchrunjob.builders import JOB_LABEL
from controller.torchrunjob.controller import Options, TorchrunJobReconciler
from controller.torchrunjob.metrics import JobsCollector
from controller.torchrunqueue.controller import QUEUE_INDEX, TorchrunQueueReconciler, job_queue_index
from controller.workqueue import RateLimitingQueue, default_controller_rate_limiter

log = structlog.get_logger("main")
SHUTDOWN_TIMEOUT = 20.0  # seconds; below the default terminationGracePeriodSeconds (30)
QUEUE_COUNTS_DELAY = 2.0  # seconds; a queue's job counts lag its jobs by at most this
Obj = Mapping[str, Any]


def _unwrap(obj: Obj | DeletedFinalStateUnknown) -> Obj:
    return obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj


def _on_any(fn: Callable[[Obj], None]) -> FuncHandler:
    return FuncHandler(
        add=lambda o, _initial: fn(o),
        update=lambda _old, new: fn(new),
        delete=lambda o: fn(_unwrap(o)),
    )


class App:
    """The controller process: everything that runs while this replica leads."""

    def __init__(self, opts: ControllerOptions, metrics: ControllerMetrics) -> None:
        self.opts = opts
        self.metrics = metrics
        pool = opts.threadiness * 2 + 8  # reconcile writes, events, GC and one watch per informer
        self.client = RESTClient(
            load_config(opts.kubeconfig),
            qps=opts.kube_api_qps,
            burst=opts.kube_api_burst,
            pool_size=pool,
            metrics=metrics,
        )
        self.factory = SharedInformerFactory(
            self.client, namespace=opts.namespace, resync_period=opts.resync_period, metrics=metrics
        )
        f = self.factory
        owned = f"{JOB_LABEL}"
        self.jobs_informer = f.informer_for(TORCHRUNJOBS, indexers={QUEUE_INDEX: job_queue_index})
        self.queues_informer = f.informer_for(TORCHRUNQUEUES)
        # pods are the biggest cache: keep only what the controllers read (cache/transforms.py)
        f.informer_for(PODS, label_selector=owned, transform=slim_pod)
        self.owned = {res: f.informer_for(res, label_selector=owned) for res in (JOBS, SERVICES, PODS, PVCS)}
        provider = PrometheusWorkqueueMetricsProvider(metrics.registry)
        self.recorder = EventRecorder(self.client)
        job_reconciler = TorchrunJobReconciler(
            self.client,
            jobs=f.lister_for(TORCHRUNJOBS),
            queues=f.lister_for(TORCHRUNQUEUES),
            worker_jobs=f.lister_for(JOBS, label_selector=owned),
            services=f.lister_for(SERVICES, label_selector=owned),
            pods=f.lister_for(PODS, label_selector=owned),
            recorder=self.recorder,
            options=Options(autoclean=opts.autoclean, restart_limit=opts.restart_limit),
            metrics=metrics,
        )
        queue_reconciler = TorchrunQueueReconciler(
            self.client, queues=f.lister_for(TORCHRUNQUEUES), jobs=f.lister_for(TORCHRUNJOBS)
        )
        self.job_controller = Controller(
            "torchrunjob",
            job_reconciler,
            RateLimitingQueue(
                default_controller_rate_limiter(), name="torchrunjob", metrics_provider=provider
            ),
            threadiness=opts.threadiness,
            metrics=metrics,
        )
        self.queue_controller = Controller(
            "torchrunqueue",
            queue_reconciler,
            RateLimitingQueue(
                default_controller_rate_limiter(), name="torchrunqueue", metrics_provider=provider
            ),
            threadiness=1,
            metrics=metrics,
        )
        self.gc = GarbageCollector(
            self.client,
            f.lister_for(TORCHRUNJOBS),
            TORCHRUNJOBS,
            {res: f.lister_for(res, label_selector=owned) for res in (JOBS, SERVICES, PODS, PVCS)},
            interval=opts.gc_interval,
            metrics=metrics,
        )
        metrics.registry.register(JobsCollector(f.lister_for(TORCHRUNJOBS)))
        self._wire()
        self.synced = threading.Event()

    def _wire(self) -> None:
        jobs, queues = self.job_controller, self.queue_controller

        def job_changed(obj: Obj) -> None:
            meta = obj["metadata"]
            jobs.enqueue(f"{meta['namespace']}/{meta['name']}")
            queue = (obj.get("spec") or {}).get("jobQueue")
            if queue:
                # job counts only: coalesce a burst of job changes into one queue status write
                queues.enqueue_after(queue, QUEUE_COUNTS_DELAY)

        def queue_changed(obj: Obj) -> None:
            name = obj["metadata"]["name"]
            queues.enqueue(name)
            for job in self.jobs_informer.indexer.by_index(QUEUE_INDEX, name):
                jobs.enqueue(f"{job['metadata']['namespace']}/{job['metadata']['name']}")

        def owned_changed(obj: Obj) -> None:
            meta = obj["metadata"]
            owner = (meta.get("labels") or {}).get(JOB_LABEL)
            if owner:
                jobs.enqueue(f"{meta['namespace']}/{owner}")

        self.jobs_informer.add_event_handler(_on_any(job_changed))
        self.queues_informer.add_event_handler(_on_any(queue_changed))
        for res, informer in self.owned.items():
            if res != PVCS:
                informer.add_event_handler(_on_any(owned_changed))

    def run(self, stop: threading.Event) -> None:
        self.factory.start(stop)
        synced = self.factory.wait_for_cache_sync(300)
        if not all(synced.values()):
            raise RuntimeError(f"caches did not sync: {synced}")
        self.synced.set()
        log.info("caches synced", informers=sorted(synced))
        self.queue_controller.run()
        self.job_controller.run()
        self.gc.start(stop)

    def shutdown(self) -> None:
        self.job_controller.shutdown()
        self.queue_controller.shutdown()
        self.factory.shutdown()
        self.recorder.shutdown()


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    logconf.configure(opts.log_level, opts.log_format)
    metrics = ControllerMetrics(_registry())
    try:
        app = App(opts, metrics)
    except Exception as exc:  # bad kubeconfig and the like: one clear line
        print(f"torchrun-controller: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    lost = threading.Event()
    elector: LeaderElector | None = None

    def ready() -> bool:
        # a standby replica is ready (it serves its purpose: waiting); a leader once synced
        return app.synced.is_set() or (elector is not None and not elector.is_leader)

    servers = [MetricsServer(opts.metrics_addr, metrics.registry, ready=ready).start()]
    if opts.health_addr != opts.metrics_addr:
        servers.append(MetricsServer(opts.health_addr, metrics.registry, ready=ready).start())

    def on_signal(signum: int, _frame: object) -> None:
        log.info("shutting down", signal=signal.Signals(signum).name)
        stop.set()

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` dumps every thread's stack
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if opts.leader_elect:
        ns = opts.leader_elect_namespace or current_namespace(opts.kubeconfig)
        identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"

        def lost_lease() -> None:
            if not stop.is_set():
                lost.set()
                stop.set()

        elector = LeaderElector(
            app.client,
            LeaderElectionConfig(
                lease_name="torchrun-controller",
                namespace=ns,
                identity=identity,
                lease_duration=opts.lease_duration,
                renew_deadline=opts.renew_deadline,
                retry_period=opts.retry_period,
                on_started_leading=lambda: _run_or_stop(app, stop),
                on_stopped_leading=lost_lease,
            ),
            metrics,
        )
        threading.Thread(target=elector.run, args=(stop,), name="leader-election", daemon=True).start()
    else:
        threading.Thread(target=_run_or_stop, args=(app, stop), name="startup", daemon=True).start()
    stop.wait()
    # drain what the workers hold, but never hang the pod's termination on it
    closer = threading.Thread(target=app.shutdown, name="shutdown", daemon=True)
    closer.start()
    closer.join(SHUTDOWN_TIMEOUT)
    if closer.is_alive():
        log.warning("shutdown did not finish in time; exiting anyway", timeout=SHUTDOWN_TIMEOUT)
    for s in servers:
        s.shutdown()
    if lost.is_set():
        log.error("leader election lost; exiting so a restart makes this replica a candidate again")
        return 1
    return 0


def _run_or_stop(app: App, stop: threading.Event) -> None:
    try:
        app.run(stop)
    except Exception:
        log.exception("start-up failed")
        stop.set()


if __name__ == "__main__":
    raise SystemExit(main())
