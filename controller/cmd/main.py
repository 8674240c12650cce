"""`torchrun-controller`: wire informers, workqueues, reconcilers, GC, metrics and leader election.

Start-up: serve /healthz, /readyz and /metrics at once and start the informers (a standby
replica's caches are warm when it takes over); then (after winning the Lease, with
--leader-elect) wait for the caches and start the workers, the garbage collector and the
elastic autoscaler. SIGTERM/SIGINT stop the workers taking keys, let
the reconciles in flight finish (at most SHUTDOWN_TIMEOUT), stop the informers, and only then
release the Lease and exit 0.
Losing the Lease exits 1 at once, and a write fence keeps every write from leaving the process
once the Lease may have passed to another replica. A bad flag exits 2 with one line
(options.py); a failed start-up exits 1 with one line: on stderr for a kubeconfig that cannot be
loaded or an address that cannot be served, the log's `start-up failed` for caches that never sync.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial

import structlog
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from controller import log as logconf
from controller.api.resources import TORCHRUNJOBS
from controller.autoscaler import new_autoscaler
from controller.cache import OptionalInformers, SharedInformerFactory
from controller.cmd.options import ControllerOptions, parse
from controller.gc import GarbageCollector
from controller.leaderelection import LeaderElectionConfig, LeaderElector
from controller.leaderelection.podlabel import pod_label_from_env
from controller.metrics.registry import ControllerMetrics
from controller.metrics.server import MetricsServer
from controller.metrics.workqueue import PrometheusWorkqueueMetricsProvider
from controller.progress.endpoint import ProgressEndpoint, report_counter
from controller.progress.identity import TokenReviewer
from controller.progress.store import ProgressStore
from controller.progress.supervisors import SupervisorStates
from controller.progress.tls import ca_bundle, server_context
from controller.progress.tokens import REVIEW_BURST, REVIEW_QPS, REVIEWS_IN_FLIGHT
from controller.rest import RESTClient, load_config
from controller.rest.discovery import Discovery
from controller.rest.loading import current_namespace
from controller.rest.resources import JOBS, PODS
from controller.runtime.events import EventRecorder
from controller.torchrunjob import wiring as torchrunjob_wiring
from controller.torchrunjob.controller import Options
from controller.torchrunjob.manifests.progress import ReporterSettings
from controller.torchrunjob.metrics import JobsCollector, ProgressCollector
from controller.torchrunjob.progress import ProgressSettings
from controller.torchrunqueue import wiring as torchrunqueue_wiring

log = structlog.get_logger("main")
SHUTDOWN_TIMEOUT = 20.0  # seconds; below the default terminationGracePeriodSeconds (30)
CACHE_SYNC_TIMEOUT = 300.0  # seconds a leader waits for its caches before start-up fails
CACHE_POLL = 1.0  # seconds between looks at the caches (and at `stop`) while they sync


class App:
    """The controller process: everything that runs while this replica leads."""

    def __init__(self, opts: ControllerOptions, metrics: ControllerMetrics) -> None:
        self.opts = opts
        self.metrics = metrics
        # reconcile writes, events, GC, autoscaler and one watch per informer (8, and up to 6 optional ones)
        pool = opts.threadiness * 2 + 16
        # every client of the process: one cluster config and one registry, each its own pool and limiter
        self.new_client = partial(RESTClient, load_config(opts.kubeconfig), metrics=metrics)
        self.client = self.new_client(qps=opts.kube_api_qps, burst=opts.kube_api_burst, pool_size=pool)
        self.factory = SharedInformerFactory(
            self.client, namespace=opts.namespace, resync_period=opts.resync_period, metrics=metrics
        )
        f = self.factory
        discovery = Discovery(self.client)
        # scheduler CRDs may come later: their informers start when first needed (cache/optional.py)
        self.optional_informers = OptionalInformers(f, discovery.served)
        provider = PrometheusWorkqueueMetricsProvider(metrics.registry)
        self.recorder = EventRecorder(self.client)
        # reports reach the leader's memory through the endpoint (`progress_endpoint`)
        self.progress = ProgressStore() if opts.progress_bind_address else None
        self.supervisors = SupervisorStates() if opts.progress_bind_address else None
        reporter = ReporterSettings(opts.progress_url, ca_bundle(opts.progress_cert_dir))
        progress = ProgressSettings(self.progress, opts.progress_period, reporter, self.supervisors)
        # each controller registers its own informers and event handlers (its package's wiring.py)
        self.job_controller = torchrunjob_wiring.new_controller(
            f,
            self.client,
            self.recorder,
            informers=self.optional_informers,
            options=Options(
                autoclean=opts.autoclean,
                restart_limit=opts.restart_limit,
                sync_image=opts.sync_image,
                upload_timeout=opts.upload_timeout,
                claim_bind_timeout=opts.claim_bind_timeout,
                cluster_domain=opts.cluster_domain,
                progress=progress,
            ),
            threadiness=opts.threadiness,
            metrics=metrics,
            metrics_provider=provider,
        )
        self.queue_controller = torchrunqueue_wiring.new_controller(
            f,
            self.client,
            informers=self.optional_informers,
            discovery=discovery,
            metrics=metrics,
            metrics_provider=provider,
        )
        owned = torchrunjob_wiring.owned_listers(f)
        self.gc = GarbageCollector(
            self.client,
            f.lister_for(TORCHRUNJOBS),
            TORCHRUNJOBS,
            owned,
            interval=opts.gc_interval,
            metrics=metrics,
        )
        # leader-only like the GC: elastic jobs grow into free GPUs and shrink under load
        self.autoscaler = new_autoscaler(
            f,
            self.client,
            self.recorder,
            max_load=opts.max_load_desired,
            period=opts.autoscaler_period,
            metrics=metrics,
        )
        self.synced = threading.Event()
        self._unsynced: list[str] = []  # the caches not synced at the last look (start_caches)

    def start_caches(self, stop: threading.Event) -> None:
        """Start the informers and return once every cache has synced (sets `synced`) or `stop` is
        set. Every replica does this at start-up, a standby too (as controller-runtime's manager
        starts its caches before the election): a takeover then starts the workers on warm
        caches instead of listing everything first. A standby only reads; the write fence and
        `run` keep every write to the leader."""
        self.factory.start(stop)
        self.optional_informers.start(stop)
        while not stop.is_set():
            synced = self.factory.wait_for_cache_sync(CACHE_POLL)
            if all(synced.values()):
                self.synced.set()
                log.info("caches synced", informers=sorted(synced))
                return
            self._unsynced = sorted(name for name, ok in synced.items() if not ok)

    def run(self, stop: threading.Event) -> None:
        """Start the controllers, the garbage collector and the autoscaler (this replica leads),
        once the caches `start_caches` fills have synced; raises if they have not within
        CACHE_SYNC_TIMEOUT of this call. Returns at once, starting nothing, if `stop` is set."""
        deadline = time.monotonic() + CACHE_SYNC_TIMEOUT
        while not self.synced.wait(CACHE_POLL):
            if stop.is_set():
                return  # shut down while waiting: start nothing
            if time.monotonic() > deadline:
                missing = ", ".join(self._unsynced) or "none had started"
                raise RuntimeError(f"caches did not sync within {CACHE_SYNC_TIMEOUT:g}s: {missing}")
        if stop.is_set():
            return
        # the jobs' gauges come from the leader alone: a standby's (warm) cache would count them twice
        self.metrics.registry.register(JobsCollector(self.factory.lister_for(TORCHRUNJOBS)))
        if self.opts.progress_job_metrics:
            jobs = self.factory.lister_for(TORCHRUNJOBS)
            self.metrics.registry.register(ProgressCollector(jobs, self.opts.restart_limit))
        self.queue_controller.run()
        self.job_controller.run()
        self.gc.start(stop)
        self.autoscaler.start(stop)

    def progress_endpoint(self, accepting: Callable[[], bool]) -> ProgressEndpoint | None:
        """The progress endpoint (`--progress-bind-address`), served by every replica from the
        start: it answers 503 until `accepting` (this replica leads and its caches synced)."""
        if self.progress is None:
            return None
        owned = torchrunjob_wiring.owned_listers(self.factory)
        return ProgressEndpoint(
            self.opts.progress_bind_address,
            server_context(self.opts.progress_cert_dir),
            reviewer=TokenReviewer(self.review_client()),
            store=self.progress,
            pods=owned[PODS],
            worker_jobs=owned[JOBS],
            jobs=self.factory.lister_for(TORCHRUNJOBS),
            accepting=accepting,
            enqueue=self.job_controller.enqueue,
            reports=report_counter(self.metrics.registry),
            supervisors=self.supervisors,
        ).start()

    def review_client(self) -> RESTClient:
        """The progress endpoint's own client, for TokenReviews and the service-account keys: its
        pool and limiter are its own (the gate in progress/tokens.py keeps it under them), so a
        flood of reports never delays a reconcile's request."""
        return self.new_client(
            qps=2 * REVIEW_QPS,
            burst=2 * REVIEW_BURST,
            pool_size=REVIEWS_IN_FLIGHT,
            timeout=10.0,
            user_agent=f"{self.client.user_agent}/token-review",
        )

    def shutdown(self) -> None:
        """Stop both controllers taking keys at once, let in-flight reconciles finish, then stop
        the informers and flush the pending Events."""
        controllers = (self.job_controller, self.queue_controller)
        drains = [threading.Thread(target=c.shutdown, name=f"drain-{c.name}") for c in controllers]
        for t in drains:
            t.start()
        for t in drains:
            t.join()
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
        _fail_start_up(str(exc))
        return 1
    stop = threading.Event()  # SIGTERM/SIGINT, or start-up failed: stop the controllers
    failed = threading.Event()
    elector: LeaderElector | None = None
    elector_thread: threading.Thread | None = None
    released = threading.Event()  # the controllers are stopped: give the Lease up

    def ready() -> bool:
        # a standby replica is ready (it serves its purpose: waiting); a leader once synced
        return app.synced.is_set() or (elector is not None and not elector.is_leader)

    servers: list[MetricsServer] = []
    for address in dict.fromkeys((opts.metrics_addr, opts.health_addr)):  # one server when they agree
        try:
            servers.append(MetricsServer(address, metrics.registry, ready=ready).start())
        except OSError as exc:  # taken, or not an address of this host
            _fail_start_up(f"cannot serve on {address}: {exc}")
            for s in servers:
                s.shutdown()
            return 1

    def leading() -> bool:
        return app.synced.is_set() and (elector is None or elector.is_leader)

    try:
        endpoint = app.progress_endpoint(leading)
    except (OSError, ValueError) as exc:  # the address is taken, or the certificate unreadable
        _fail_start_up(f"cannot serve progress on {opts.progress_bind_address}: {exc}")
        for s in servers:
            s.shutdown()
        return 1

    def on_signal(signum: int, _frame: object) -> None:
        log.info("shutting down", signal=signal.Signals(signum).name)
        stop.set()

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` dumps every thread's stack
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # the caches fill at once, on a standby too; the controllers start once this replica leads
    threading.Thread(target=app.start_caches, args=(stop,), name="caches", daemon=True).start()
    if opts.leader_elect:
        elector, elector_thread = _start_leader_election(app, opts, metrics, stop, failed, released)
    else:
        threading.Thread(target=_run_or_stop, args=(app, stop, failed), name="startup", daemon=True).start()
    stop.wait()
    # stop taking keys and let the reconciles in flight finish (still leading, still renewing),
    # but never hang the pod's termination on them
    closer = threading.Thread(target=app.shutdown, name="shutdown", daemon=True)
    closer.start()
    closer.join(SHUTDOWN_TIMEOUT)
    if closer.is_alive():
        log.warning("shutdown did not finish in time; exiting anyway", timeout=SHUTDOWN_TIMEOUT)
    if elector_thread is not None:
        released.set()  # only now: the fence closes, then the Lease is released
        elector_thread.join(2 * opts.renew_deadline)
    for s in servers:
        s.shutdown()
    if endpoint is not None:
        endpoint.shutdown()
    return 1 if failed.is_set() else 0


def _start_leader_election(
    app: App,
    opts: ControllerOptions,
    metrics: ControllerMetrics,
    stop: threading.Event,
    failed: threading.Event,
    released: threading.Event,
) -> tuple[LeaderElector, threading.Thread]:
    """Campaign for the Lease in a thread: the controllers run while this replica leads, and no
    write leaves the process unless the Lease is provably still ours (the write fence)."""
    identity = opts.leader_elect_identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    # every request names this replica (audit logs tell replicas apart)
    app.client.user_agent = f"{app.client.user_agent}/{identity}"
    # in a pod (the downward API's POD_NAME): the leader labels its pod, so the progress Service
    # routes reports to it alone, and takes the label off the other replicas
    label = pod_label_from_env(app.client, os.environ)

    def started_leading() -> None:
        if label is not None:
            threading.Thread(
                target=label.run, args=(stop, elector.may_write), name="leader-label", daemon=True
            ).start()
        _run_or_stop(app, stop, failed)

    def stopped_leading() -> None:
        if label is not None:
            label.drop()  # best effort, unfenced: the next leader takes it off anyway
        if not released.is_set():
            _exit_lost_lease()

    elector = LeaderElector(
        # its own pool and rate limiter: a renewal never queues behind reconcile traffic
        app.new_client(pool_size=2, user_agent=app.client.user_agent),
        LeaderElectionConfig(
            lease_name="torchrun-controller",
            namespace=opts.leader_elect_namespace or current_namespace(opts.kubeconfig),
            identity=identity,
            lease_duration=opts.lease_duration,
            renew_deadline=opts.renew_deadline,
            retry_period=opts.retry_period,
            on_started_leading=started_leading,
            on_stopped_leading=stopped_leading,
        ),
        metrics,
    )
    app.client.write_fence = elector.may_write
    thread = threading.Thread(target=elector.run, args=(released,), name="leader-election", daemon=True)
    thread.start()
    return elector, thread


def _fail_start_up(message: str) -> None:
    """The one line of a start-up that failed before anything ran (a YAML error is several)."""
    print(f"torchrun-controller: {' '.join(message.split())}", file=sys.stderr)


def _run_or_stop(app: App, stop: threading.Event, failed: threading.Event) -> None:
    if stop.is_set():
        return  # won the Lease while shutting down: start nothing, it is released next
    try:
        app.run(stop)
    except Exception as exc:
        if not stop.is_set():
            log.error("start-up failed", error=str(exc))
            failed.set()
            stop.set()


def _exit_lost_lease() -> None:
    """Like client-go controllers (klog.Fatalf in OnStoppedLeading): stop at once, exit 1, so a
    restart makes this replica a candidate again. The write fence already refuses every write."""
    log.error("leader election lost; exiting")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


if __name__ == "__main__":
    raise SystemExit(main())
