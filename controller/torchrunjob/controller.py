"""The TorchrunJob reconciler: level-based, idempotent, one key at a time (sample-controller's
`syncHandler`).

`reconcile(key)` reads the job from the lister and runs `sync`: a list of steps, top to bottom,
that stops at the first `Wait` (`steps.py`):
  0. a finished job: what `lifecycle.finished` says (etcd, autoclean, TTL) and nothing else;
  1. `admit`: the queue exists and is Ready, the job is valid against it → its topology;
  2. `lifecycle.deadline`: `activeDeadlineSeconds` counted from the start;
  3. `workspace`: the PVCs exist and the code generation the spec asks for is synced by its
     sync pod (`workspace.py`; `WorkspaceReady`, phase `Syncing` until then);
  4. `service`: the headless Service, its spec patched back if it drifted;
  5. `etcd`: for etcd-v2 without an endpoint, the managed etcd (`managed_etcd.py`);
  6. `gang`: the scheduler's PodGroup, or Kueue's Workload following suspend (`podgroups.py`);
  7. `workers`: the worker Job of the current attempt (`workers.py`), whose state becomes
     conditions — suspended, running, or ended (`lifecycle.attempt_ended`: success, whole-job
     restart, failure) — and, once a newer code generation is synced, the workers made before it
     restart onto it (hot reload).
Every step returns a value and never writes the status; the status is computed from what the
steps returned and written once at the end **on every path**, an exception's included (the
exception then still propagates: the key is retried with backoff). Writes happen only when the
status changed; transitions become Events (`status.transition_events`). Timers (TTL, deadline,
a claim's bind deadline) come back as `Result(requeue_after=...)` for the exact moment; a `Wait`
no event announces (a name conflict) as a rate-limited `Result(requeue=True)`. Invalid specs
become a condition and are not retried. Nothing is requeued at once after our own writes: their
watch events bring the key back. A job written with the seed's deprecated `volumes.workspace`
gets one Warning Event (`DeprecatedField`) per controller process.
"""

from __future__ import annotations

import dataclasses

import structlog

from controller.api import InvalidObjectError, TorchrunJob, find_condition, to_json
from controller.api import JobConditionType as C
from controller.api.resources import TORCHRUNJOBS
from controller.cache import Lister
from controller.clock import utc_now
from controller.meta import Obj
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import JOBS, PODS, PVCS, SERVICES
from controller.runtime import Result
from controller.runtime.events import NORMAL, WARNING, EventRecorder
from controller.runtime.status import update_status
from controller.torchrunjob import lifecycle
from controller.torchrunjob import status as st
from controller.torchrunjob import workspace as ws
from controller.torchrunjob.admission import Admission, Refusal, admit
from controller.torchrunjob.children import Children
from controller.torchrunjob.lifecycle import Action, Decision
from controller.torchrunjob.managed_etcd import ManagedEtcd
from controller.torchrunjob.manifests.etcd import READY, EtcdState
from controller.torchrunjob.manifests.rendezvous import DEFAULT_CLUSTER_DOMAIN
from controller.torchrunjob.manifests.service import build_service, service_drift
from controller.torchrunjob.manifests.storage import DEFAULT_SYNC_IMAGE
from controller.torchrunjob.podgroups import PodGroups
from controller.torchrunjob.reasons import Reason
from controller.torchrunjob.steps import Proceed, Step
from controller.torchrunjob.updater import JobTracker, JobUpdater
from controller.torchrunjob.workers import Attempt, Workers, WorkerSettings

log = structlog.get_logger("torchrunjob")


@dataclasses.dataclass
class Options:
    autoclean: bool = False
    restart_limit: int = 10
    sync_image: str = DEFAULT_SYNC_IMAGE
    upload_timeout: float = 3600.0
    claim_bind_timeout: float = 300.0
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN


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
        self.workers = Workers(
            client, self.children, pods, WorkerSettings(opts.sync_image, opts.cluster_domain)
        )
        self.pod_groups = pod_groups
        self.metrics = metrics or client.metrics
        self.tracker = JobTracker()

    def reconcile(self, key: str) -> Result | None:
        ns, _, name = key.partition("/")
        raw = self.jobs.get(name, ns)
        if raw is None:
            self.tracker.drop(key)
            return None
        if raw["metadata"].get("deletionTimestamp"):
            return None  # owner references take the rest away
        try:
            job = TorchrunJob.from_json(raw)
        except InvalidObjectError as exc:
            update_status(self.client, TORCHRUNJOBS, raw, st.invalid_status(raw, str(exc), utc_now()))
            return None
        updater = self.tracker.get_or_create(key, job.metadata.uid)
        if job.spec.seed_workspace and updater.once("seed_form_warned"):
            self.warn_deprecated(raw, job)
        p = st.StatusUpdate(job, utc_now())
        try:
            self.sync(job, p, updater)
        finally:  # what the steps returned so far is written even when one raised
            self.write_status(raw, p)
        if p.requeue:
            return Result(requeue=True)
        return Result(requeue_after=min(p.timers)) if p.timers else None

    def sync(self, job: TorchrunJob, p: st.StatusUpdate, updater: JobUpdater) -> None:
        """The steps of the module docstring; each returns, `p` records."""
        if p.is_true(C.SUCCEEDED) or p.is_true(C.FAILED):
            self.decide(job, p, self.finished(job, p))
            return
        admission = self.admit(job, p)
        if admission is None:
            return
        if self.decide(job, p, self.deadline(job, p)).stop:
            return
        if p.waits(self.workspace_step(job, admission, p)) or p.waits(self.service(job)):
            return
        etcd = self.etcd_step(job, admission, p)
        if p.waits(etcd) or p.waits(self.pod_groups.ensure(job, admission.queue, admission.topology)):
            return
        assert isinstance(etcd, Proceed)
        attempt = self.workers.ensure(job, admission, p.status, etcd.value)
        if isinstance(attempt, Proceed):
            self.observe(job, attempt.value, p, updater)
        else:
            p.waits(attempt)

    # -- the steps ---------------------------------------------------------------------------

    def admit(self, job: TorchrunJob, p: st.StatusUpdate) -> Admission | None:
        """The queue, topology and command when the job may run; else None and `Admitted=False`."""
        verdict = admit(job, self.queues.get(job.spec.job_queue))
        if isinstance(verdict, Refusal):
            p.cond(C.ADMITTED, False, verdict.reason, verdict.message)
            return None
        p.cond(C.ADMITTED, True, Reason.ADMITTED, verdict.message)
        p.set(nodes=verdict.topology.nodes, gpus=verdict.topology.total_gpus)
        if p.status.start_time is None:
            p.set(start_time=p.now)
        return verdict

    def deadline(self, job: TorchrunJob, p: st.StatusUpdate) -> Decision:
        spec = job.spec
        return lifecycle.deadline(
            spec.active_deadline_seconds,
            spec.suspend,
            p.status.start_time,
            spec.ttl_seconds_after_finished,
            p.now,
        )

    def workspace_step(
        self, job: TorchrunJob, admission: Admission, p: st.StatusUpdate
    ) -> Step[ws.WorkspaceState]:
        """The PVCs exist and a code generation is synced (the one in use stays during a reload)."""
        got = self.workspace.ensure(job, admission.queue, admission.topology, p.status, p.now)
        if isinstance(got, Proceed):
            state = got.value
            p.cond(C.WORKSPACE_READY, True, state.reason, state.message)
            if state.generation is not None:
                p.set(
                    workspace_generation=state.generation,
                    workspace_sha256=state.sha256,
                    workspace_sync_time=state.synced_at,
                )
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
        """The attempt's state becomes the job's conditions (lifecycle.py)."""
        topo, fp = attempt.topology, job.spec.failure_policy
        p.set(nodes=topo.nodes, gpus=topo.total_gpus, workers=st.worker_counts(attempt.job))
        was_suspended = find_condition(p.status.conditions, C.SUSPENDED) is not None
        p.record(*lifecycle.suspension(job.spec.suspend, was_suspended))
        if job.spec.suspend:
            return
        outcome = st.worker_outcome(attempt.job)
        if outcome is None:
            seen = self.workers.retriable_failures(job, attempt.job, fp.retriable_exit_codes)
            # failed pods may be cleaned up by someone else: the count never goes down in an attempt
            p.set(retriable_failures=max(seen, p.status.retriable_failures))
            cap = fp.max_retriable_failures
            outcome = lifecycle.retriable_limit(p.status.retriable_failures, cap, fp.retriable_exit_codes)
        if outcome is not None:
            limit = min(fp.max_restarts, self.options.restart_limit)
            restarts, ttl = p.status.restarts, job.spec.ttl_seconds_after_finished
            self.decide(
                job,
                p,
                lifecycle.attempt_ended(outcome, restarts=restarts, limit=limit, ttl_seconds=ttl, now=p.now),
            )
            return
        self.reload(job, attempt.job, p)
        ready = p.status.workers.ready
        blocked = None if ready >= topo.nodes else self.workers.unschedulable(job)
        running = lifecycle.running(ready, topo.nodes, blocked)
        p.record(running)
        if (
            running.status
            and job.metadata.creation_timestamp is not None
            and updater.once("running_observed")
        ):
            self.metrics.submit_to_running.observe((p.now - job.metadata.creation_timestamp).total_seconds())

    def reload(self, job: TorchrunJob, worker_job: Obj, p: st.StatusUpdate) -> None:
        """Hot reload: workers made before the generation in use was synced restart onto it."""
        evicted = self.workspace.roll(job, worker_job, p.status)
        if evicted:
            message = (
                f"workspace generation {p.status.workspace_generation} synced: restarting {evicted} worker "
                "pod(s) onto it together (the Job, PVCs and Service stay)"
            )
            raw = self.jobs.get(job.name, job.namespace) or {}
            self.recorder.event(raw, NORMAL, Reason.WORKSPACE_RELOADED, message)

    # -- lifecycle decisions and what they do ----------------------------------------------------

    def finished(self, job: TorchrunJob, p: st.StatusUpdate) -> Decision:
        worker = self.children.get(JOBS, job)
        return lifecycle.finished(
            managed_etcd=job.spec.distributed.runs_managed_etcd,
            autoclean=self.options.autoclean,
            workers_running=worker is not None and st.worker_outcome(worker) is None,
            ttl_seconds=job.spec.ttl_seconds_after_finished,
            completion_time=p.status.completion_time,
            now=p.now,
        )

    def decide(self, job: TorchrunJob, p: st.StatusUpdate, decision: Decision) -> Decision:
        """Record `decision`'s conditions, changes and timer, and carry out its actions."""
        p.record(*decision.conditions)
        if decision.changes:
            p.set(**decision.changes)
        p.timer(decision.requeue_after)
        for action in decision.actions:
            self.act(job, action)
        return decision

    def act(self, job: TorchrunJob, action: Action) -> None:
        if action is Action.DELETE_WORKERS:
            self.children.delete(JOBS, job)
        elif action is Action.REMOVE_ETCD:
            self.etcd.remove(job)
        elif action is Action.REMOVE_ETCD_SERVICE:
            self.etcd.remove(job, service=True)
        elif action is Action.DELETE_SERVICE:
            self.children.delete(SERVICES, job)
        elif action is Action.CLEAN_WORKSPACE:
            self.workspace.clean(job)
        elif action is Action.DELETE_JOB:
            try:
                self.client.delete(TORCHRUNJOBS, job.name, job.namespace, uid=job.metadata.uid)
                log.info("deleted after ttlSecondsAfterFinished", key=job.key)
            except ApiError as exc:
                if not (exc.not_found or exc.conflict):
                    raise

    # -- status and Events ----------------------------------------------------------------------

    def write_status(self, raw: Obj, p: st.StatusUpdate) -> None:
        """Write the status if it changed, then one Event per condition transition worth one."""
        final = p.final()
        if not update_status(self.client, TORCHRUNJOBS, raw, to_json(final)):
            return
        for event in st.transition_events(p.job.status.conditions, final.conditions):
            self.recorder.event(raw, WARNING if event.warning else NORMAL, event.reason, event.message)
        if final.retriable_failures > p.job.status.retriable_failures:
            cap = p.job.spec.failure_policy.max_retriable_failures
            message = (
                f"{final.retriable_failures} pod failure(s) with a retriable exit code in this attempt; "
                f"up to {cap} are retried in place"
            )
            self.recorder.event(raw, WARNING, Reason.RETRIABLE_FAILURE, message)
        log.info("status", key=p.job.key, phase=final.phase.value, restarts=final.restarts)

    def warn_deprecated(self, raw: Obj, job: TorchrunJob) -> None:
        """The Warning Event for the seed's `volumes.workspace` spelling."""
        source = job.spec.workspace.source.value
        message = (
            "spec.volumes.workspace is the seed's deprecated spelling of spec.workspace; it is read as "
            f"workspace: {{source: {source}}}: write that instead (both at once are refused)"
        )
        self.recorder.event(raw, WARNING, Reason.DEPRECATED_FIELD, message)
