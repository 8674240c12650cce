"""The TorchrunJob reconciler: level-based, idempotent, one key at a time (`syncHandler`).

`reconcile(key)` reads the job from the lister and runs `sync`, a list of steps that stops at the
first `Wait` (`steps.py`): a finished job gets only `lifecycle.finished` (etcd, workers or a
sync still at work, autoclean, TTL); else `admit` (queue Ready, job valid → topology),
`lifecycle.deadline`, the `workspace` (PVCs, the code generation synced: `workspace.py`), the
headless `service`, the managed `etcd` of etcd-v2 rendezvous (`managed_etcd.py`), the `gang`
(`podgroups.py`), and the `workers` of the current attempt (`workers.py`), whose state becomes
conditions — suspended, running or why not (`starting.py`; hot reload rolls workers made
before the generation in use; `progress.py`: status.progress, Progressing, a stall), or ended
(`lifecycle.attempt_ended`).
No step writes the status: it is computed from what the steps returned and written once, **on
every path** — an exception's too, which then still propagates so the key is retried with backoff
(`reporter.py`: only when it changed; transitions become Events) — but a write that would
change only the worker counts (and the messages that quote them) waits up to `COUNTS_BATCH`
seconds for more, so pods starting together cost a write per batch, not one per count. Timers come back as
`Result(requeue_after=...)`, a `Wait` no event announces (a name conflict) as a rate-limited
`Result(requeue=True)`; nothing is requeued at once after our own writes (their watch events bring
the key back); a pass that finds the cached job still at the version our last status write
replaced (a child's event came first) ends at once: it would decide on a status we replaced and
conflict with our own write. Invalid specs become a condition and are not retried.
"""

from __future__ import annotations

import dataclasses
import time

import structlog

from controller.api import InvalidObjectError, TorchrunJob, find_condition
from controller.api import JobConditionType as C
from controller.api.reasons import Reason
from controller.api.resources import TORCHRUNJOBS
from controller.cache import Lister
from controller.clock import utc_now
from controller.meta import Obj
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.resources import JOBS, PODS, PVCS, SERVICES
from controller.runtime import Result
from controller.runtime.events import EventRecorder
from controller.runtime.status import update_status
from controller.torchrunjob import lifecycle, starting
from controller.torchrunjob import status as st
from controller.torchrunjob import workspace as ws
from controller.torchrunjob.actions import Actions
from controller.torchrunjob.admission import Admission, Refusal, admit
from controller.torchrunjob.children import Children
from controller.torchrunjob.lifecycle import Decision
from controller.torchrunjob.managed_etcd import ManagedEtcd
from controller.torchrunjob.manifests.etcd import READY, EtcdState
from controller.torchrunjob.manifests.rendezvous import DEFAULT_CLUSTER_DOMAIN
from controller.torchrunjob.manifests.service import build_service, service_drift
from controller.torchrunjob.manifests.storage import DEFAULT_SYNC_IMAGE
from controller.torchrunjob.podgroups import PodGroups
from controller.torchrunjob.progress import ProgressSettings, ProgressStep
from controller.torchrunjob.reporter import StatusReporter
from controller.torchrunjob.start_evidence import StartEvidence
from controller.torchrunjob.steps import Proceed, Step
from controller.torchrunjob.updater import JobTracker, JobUpdater, QueueParses
from controller.torchrunjob.workers import Attempt, Workers, WorkerSettings

log = structlog.get_logger("torchrunjob")

COUNTS_BATCH = 5.0
"""Seconds a status write that changes only `status.workers` and condition messages may wait for
more (`JobUpdater.hold_counts`): a 256-node job's start is a handful of writes, not one per pod."""


@dataclasses.dataclass
class Options:
    autoclean: bool = False
    restart_limit: int = 10
    sync_image: str = DEFAULT_SYNC_IMAGE
    upload_timeout: float = 3600.0
    claim_bind_timeout: float = 300.0
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    progress: ProgressSettings = dataclasses.field(default_factory=ProgressSettings)


class TorchrunJobReconciler:
    def __init__(
        self,
        client: RESTClient,
        *,
        jobs: Lister,
        queues: Lister,
        worker_jobs: Lister,
        services: Lister,
        pods: Lister,
        claims: Lister,
        recorder: EventRecorder,
        pod_groups: PodGroups,
        options: Options | None = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.client = client
        self.jobs = jobs
        self.queues = queues
        self.recorder = recorder
        self.options = opts = options or Options()
        self.children = Children(client, {JOBS: worker_jobs, SERVICES: services, PODS: pods, PVCS: claims})
        self.etcd = ManagedEtcd(self.children)
        settings = ws.WorkspaceSettings(opts.sync_image, opts.upload_timeout, opts.claim_bind_timeout)
        self.workspace = ws.WorkspaceSync(client, self.children, settings)
        workers = WorkerSettings(opts.sync_image, opts.cluster_domain, opts.progress.reporter)
        self.workers = Workers(client, self.children, pods, workers)
        self.pod_groups = pod_groups
        self.start_evidence = StartEvidence(client, pod_groups)
        self.actions = Actions(client, self.children, self.etcd, self.workspace)
        self.reporter = StatusReporter(client, recorder)
        self.progress = ProgressStep(opts.progress, pods)
        self.metrics = metrics or client.metrics
        self.tracker = JobTracker()
        self.queue_parses = QueueParses()

    def reconcile(self, key: str) -> Result | None:
        ns, _, name = key.partition("/")
        raw = self.jobs.get(name, ns)
        if raw is None:
            self.tracker.drop(key)
            self.progress.forget(key)
            return None
        if raw["metadata"].get("deletionTimestamp"):
            return None  # owner references take the rest away
        updater = self.tracker.get_or_create(key, raw["metadata"].get("uid", ""))
        version = raw["metadata"].get("resourceVersion", "")
        if updater.cache_behind(version):
            return None  # the watch event of our last status write brings the key back
        try:
            job = updater.memo("job", version, lambda: TorchrunJob.from_json(raw))
        except InvalidObjectError as exc:
            update_status(self.client, TORCHRUNJOBS, raw, st.invalid_status(raw, str(exc), utc_now()))
            return None
        if job.spec.seed_workspace and updater.once("seed_form_warned"):
            self.reporter.deprecated_field(raw, job)
        p = st.StatusUpdate(job, utc_now())
        try:
            self.sync(job, p, updater)
        finally:  # what the steps returned so far is written even when one raised
            held = updater.hold_counts(time.monotonic(), COUNTS_BATCH) if p.routine_only() else None
            if held is not None:
                p.timer(held)
            elif self.reporter.write(raw, p):
                updater.status_written(version)
        if p.requeue:
            return Result(requeue=True)
        return Result(requeue_after=min(p.timers)) if p.timers else None

    def sync(self, job: TorchrunJob, p: st.StatusUpdate, updater: JobUpdater) -> None:
        """The steps of the module docstring; each returns, `p` records."""
        if p.is_true(C.SUCCEEDED) or p.is_true(C.FAILED):
            worker = self.children.get(JOBS, job)
            running = worker is not None and st.worker_outcome(worker) is None
            syncing = self.workspace.syncing(job)
            autoclean = self.options.autoclean
            self.decide(job, p, lifecycle.finished_of(job, p.status, autoclean, running, syncing, p.now))
            return
        admission = self.admit(job, p, updater)
        if admission is None:
            return
        if self.decide(job, p, lifecycle.deadline_of(job, p.status, p.now)).stop:
            return
        if p.waits(self.workspace_step(job, admission, p)) or p.waits(self.service(job)):
            return
        etcd = self.etcd_step(job, admission, p)
        if p.waits(etcd) or p.waits(self.pod_groups.ensure(job, admission.queue, admission.topology)):
            return
        assert isinstance(etcd, Proceed)
        attempt = self.workers.ensure(job, admission, p.status, etcd.value, updater)
        if isinstance(attempt, Proceed):
            self.observe(job, attempt.value, p, updater)
        else:
            p.waits(attempt)

    # -- the steps ---------------------------------------------------------------------------

    def admit(self, job: TorchrunJob, p: st.StatusUpdate, updater: JobUpdater) -> Admission | None:
        """The queue, topology and command when the job may run; else None and `Admitted=False`
        (decided again only when the job or its queue changed: `JobUpdater.memo`)."""
        raw_queue = self.queues.get(job.spec.job_queue)
        meta = {} if raw_queue is None else raw_queue["metadata"]
        versions = (job.metadata.resource_version, meta.get("uid"), meta.get("resourceVersion"))
        verdict = updater.memo("admission", versions, lambda: admit(job, raw_queue, self.queue_parses.parse))
        if isinstance(verdict, Refusal):
            p.cond(C.ADMITTED, False, verdict.reason, verdict.message)
            return None
        p.cond(C.ADMITTED, True, Reason.ADMITTED, verdict.message)
        p.set(nodes=verdict.topology.nodes, gpus=verdict.topology.total_gpus)
        if p.status.start_time is None:
            p.set(start_time=p.now)
        return verdict

    def workspace_step(
        self, job: TorchrunJob, admission: Admission, p: st.StatusUpdate
    ) -> Step[ws.WorkspaceState]:
        """The PVCs exist and a code generation is synced (the one in use stays during a reload)."""
        got = self.workspace.ensure(job, admission.queue, admission.topology, p.status, p.now)
        if isinstance(got, Proceed):
            p.workspace_ready(got.value)
        return got

    def service(self, job: TorchrunJob) -> Step[Obj]:
        """The headless Service exists and is ours (its spec patched back if it drifted)."""
        desired = build_service(job)
        got = self.children.ensure(SERVICES, job, desired)
        if isinstance(got, Proceed) and (patch := service_drift(got.value, desired)) is not None:
            self.client.patch(SERVICES, job.name, patch, job.namespace)
        return got

    def etcd_step(self, job: TorchrunJob, admission: Admission, p: st.StatusUpdate) -> Step[EtcdState]:
        """The managed etcd's state (READY for jobs that need none)."""
        if not job.spec.distributed.runs_managed_etcd:
            return Proceed(READY)
        return self.etcd.ensure(job, admission.queue, p.status.restarts)

    def observe(self, job: TorchrunJob, attempt: Attempt, p: st.StatusUpdate, updater: JobUpdater) -> None:
        """The attempt's state becomes the job's conditions (lifecycle.py; a stall: progress.py)."""
        topo, fp = attempt.topology, job.spec.failure_policy
        p.set(**attempt.observed(p.status))  # size, worker counts, checkpoints
        was_suspended = find_condition(p.status.conditions, C.SUSPENDED) is not None
        p.record(*lifecycle.suspension(job.spec.suspend, was_suspended))
        if job.spec.suspend:
            return
        outcome = st.worker_outcome(attempt.job)
        stalled = self.progress.observe(job, attempt.queue, attempt.job, p, final=outcome is not None)
        if outcome is None:
            seen = st.retriable_failures(
                attempt.pods, attempt.job["metadata"]["uid"], fp.retriable_exit_codes
            )
            # failed pods may be cleaned up by someone else: the count never goes down in an attempt
            p.set(retriable_failures=max(seen, p.status.retriable_failures))
            cap = fp.max_retriable_failures
            outcome = lifecycle.retriable_limit(p.status.retriable_failures, cap, fp.retriable_exit_codes)
            outcome = outcome or stalled
        if outcome is not None:
            limit = min(fp.max_restarts, self.options.restart_limit)
            restarts, ttl = p.status.restarts, job.spec.ttl_seconds_after_finished
            self.decide(
                job,
                p,
                lifecycle.attempt_ended(outcome, restarts=restarts, limit=limit, ttl_seconds=ttl, now=p.now),
            )
            return
        evicted = self.workspace.roll(job, attempt.job, p.status)  # hot reload
        if evicted:
            self.reporter.reloaded(self.jobs.get(job.name, job.namespace) or {}, p.status, evicted)
        ready, blocked = p.status.workers.ready, None
        if ready < topo.nodes:
            evidence, look_again = self.start_evidence.gather(job, attempt, updater, p.now)
            blocked = starting.blocked(evidence)
            p.timer(look_again)
        running = lifecycle.running(ready, topo.nodes, blocked)
        p.record(running)
        if (
            running.status
            and job.metadata.creation_timestamp is not None
            and updater.once("running_observed")
        ):
            self.metrics.submit_to_running.observe((p.now - job.metadata.creation_timestamp).total_seconds())

    # -- lifecycle decisions and what they do ----------------------------------------------------

    def decide(self, job: TorchrunJob, p: st.StatusUpdate, decision: Decision) -> Decision:
        """Record `decision`'s conditions, changes and timer, and carry out its actions."""
        p.record(*decision.conditions)
        if decision.changes:
            p.set(**decision.changes)
        p.timer(decision.requeue_after)
        for action in decision.actions:
            self.actions.carry_out(job, action)
        return decision
