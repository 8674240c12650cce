"""The TorchrunJob reconciler: level-based, idempotent, one key at a time.

`reconcile(key)` reads the job from the lister and runs these steps, top to bottom, each
returning a plain value that says whether the next one runs:
  1. a finished job: autoclean and TTL only;
  2. `admit`: the queue exists and is Ready, the job is valid against it → its topology;
  3. `within_deadline`: `activeDeadlineSeconds` counted from the start;
  4. `workspace_ready`: the PVCs exist and the code generation the spec asks for is synced by
     its sync pod (`workspace.py`; `WorkspaceReady`, phase `Syncing` until then);
  5. `ensure_service`, `ensure_etcd`, the scheduler objects, `ensure_workers`: the headless
     Service, for etcd-v2 without an endpoint the managed etcd (`managed_etcd.py`; the worker
     Job is created only once it is Ready, `Running=False WaitingForEtcd` until then), and the
     Indexed Job exist as the builders describe; the worker Job's state becomes conditions, with
     a whole-job restart on a retriable failure while restarts remain; once a newer code
     generation is synced, the workers made before it are restarted onto it (hot reload).
A job written with the seed's deprecated `volumes.workspace` gets one Warning Event
(`DeprecatedField`) per controller process naming the field to write instead.
Status is written once at the end, only when it changed; transitions become Events.
Timers (TTL, deadline) come back as `Result(requeue_after=...)` for the exact moment. A name
taken by an object the job does not control gives `Admitted=False NameConflict` and a
rate-limited retry; the foreign object is never touched. Invalid specs become a condition and are
not retried. Nothing is requeued at once after our own writes: their watch events bring the key
back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import structlog

from controller.api import (
    JOB_LABEL,
    ConditionStatus,
    InvalidObjectError,
    JobConditionType,
    JobTopology,
    TorchrunJob,
    TorchrunJobStatus,
    TorchrunQueue,
    find_condition,
    to_json,
)
from controller.api.resources import TORCHRUNJOBS
from controller.cache import Lister, thaw
from controller.clock import utc_now
from controller.meta import is_controlled_by
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import JOBS, PODS, PVCS, SERVICES
from controller.runtime import Result
from controller.runtime.events import NORMAL, WARNING, EventRecorder
from controller.runtime.status import update_status
from controller.torchrunjob import status as st
from controller.torchrunjob import workspace as ws
from controller.torchrunjob.admission import Admission, Refusal, admit
from controller.torchrunjob.builders import RESTART_ANNOTATION, build_service, build_worker_job
from controller.torchrunjob.children import Children, NameConflict
from controller.torchrunjob.elastic import ElasticSize
from controller.torchrunjob.etcd import READY, EtcdState
from controller.torchrunjob.managed_etcd import ManagedEtcd
from controller.torchrunjob.podgroups import PodGroups
from controller.torchrunjob.rendezvous import DEFAULT_CLUSTER_DOMAIN
from controller.torchrunjob.scheduling import creates_suspended
from controller.torchrunjob.storage import DEFAULT_SYNC_IMAGE, with_storage, worker_storage
from controller.torchrunjob.updater import JobTracker, JobUpdater

log = structlog.get_logger("torchrunjob")

C = JobConditionType
NAME_CONFLICT = "NameConflict"
RETRIABLE_LIMIT = "RetriableFailureLimitExceeded"
_WARNING_REASONS = frozenset(
    {
        "QueueNotFound",
        "QueueNotReady",
        "InvalidSpec",
        "InvalidCommand",
        "Unschedulable",
        "Restarting",
        NAME_CONFLICT,
        "EtcdFailing",
    }
)
# transitions too routine to be worth an Event (they stay visible in the conditions)
_QUIET_REASONS = frozenset({"NoWorkspace", "WorkersStarting", "Completed"})
# WorkspaceReady reasons that are progress, not trouble; any other WorkspaceReady reason is a Warning
_WORKSPACE_PROGRESS = frozenset({"NoWorkspace", ws.SYNCED, ws.SYNCING, ws.RELOADING})


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
        self.pods = pods
        self.elastic = ElasticSize(client, pods)
        self.children = Children(client, {JOBS: worker_jobs, SERVICES: services, PODS: pods, PVCS: claims})
        self.etcd = ManagedEtcd(self.children)
        self.recorder = recorder
        self.options = options or Options()
        settings = ws.WorkspaceSettings(
            self.options.sync_image, self.options.upload_timeout, self.options.claim_bind_timeout
        )
        self.workspace = ws.WorkspaceSync(client, self.children, settings)
        self.metrics = metrics or client.metrics
        self.tracker = JobTracker()
        self.pod_groups = pod_groups

    # -- entry point ---------------------------------------------------------------------------

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
        with updater.lock:
            self.warn_deprecated(raw, job, updater)
            s = st.StatusUpdate(job, utc_now())
            self.sync(job, s, updater)
            self.write_status(raw, s)
        if s.requeue:
            return Result(requeue=True)
        return Result(requeue_after=min(s.timers)) if s.timers else None

    def sync(self, job: TorchrunJob, s: st.StatusUpdate, updater: JobUpdater) -> None:
        """The steps of the module docstring; each records its outcome in `s`."""
        if s.is_true(C.SUCCEEDED) or s.is_true(C.FAILED):
            self.finished(job, s)
            return
        admission = self.admit(job, s)
        if (
            admission is None
            or not self.within_deadline(job, s)
            or not self.workspace_ready(job, admission, s)
        ):
            return
        if not self.ensure_service(job, s):
            return
        etcd = self.ensure_etcd(job, admission.queue, s)
        if etcd is None:
            return
        self.pod_groups.ensure(job, admission.queue, admission.topology)
        self.ensure_workers(job, admission, s, updater, etcd)

    def warn_deprecated(self, raw: Mapping[str, Any], job: TorchrunJob, updater: JobUpdater) -> None:
        """One Warning Event per controller process for the seed's `volumes.workspace` spelling."""
        if not job.spec.seed_workspace or updater.seed_form_warned:
            return
        updater.seed_form_warned = True
        source = job.spec.workspace.source.value
        message = (
            "spec.volumes.workspace is the seed's deprecated spelling of spec.workspace; it is read as "
            f"workspace: {{source: {source}}}: write that instead (both at once are refused)"
        )
        self.recorder.event(raw, WARNING, "DeprecatedField", message)

    def write_status(self, raw: Mapping[str, Any], s: st.StatusUpdate) -> None:
        """Write the status if it changed, then one Event per condition transition worth one."""
        final = s.final()
        new = to_json(final)
        if not update_status(self.client, TORCHRUNJOBS, raw, new):
            return
        for cond in st.changed_conditions(s.job.status.conditions, final.conditions):
            warn = (
                cond.reason in _WARNING_REASONS
                or (cond.type == C.FAILED and cond.status is ConditionStatus.TRUE)
                or (cond.type == C.WORKSPACE_READY and cond.reason not in _WORKSPACE_PROGRESS)
            )
            if (cond.status is ConditionStatus.TRUE or warn) and cond.reason not in _QUIET_REASONS:
                self.recorder.event(raw, WARNING if warn else NORMAL, cond.reason, cond.message)
        if final.retriable_failures > s.job.status.retriable_failures:
            cap = s.job.spec.failure_policy.max_retriable_failures
            message = (
                f"{final.retriable_failures} pod failure(s) with a retriable exit code in this attempt; "
                f"up to {cap} are retried in place"
            )
            self.recorder.event(raw, WARNING, "RetriableFailure", message)
        if new != thaw(raw.get("status") or {}):
            log.info("status", key=s.job.key, phase=final.phase.value, restarts=final.restarts)

    # -- admission -----------------------------------------------------------------------------

    def admit(self, job: TorchrunJob, s: st.StatusUpdate) -> Admission | None:
        """The queue, topology and command when the job may run; else None and `Admitted=False`."""
        verdict = admit(job, self.queues.get(job.spec.job_queue))
        if isinstance(verdict, Refusal):
            s.cond(C.ADMITTED, False, verdict.reason, verdict.message)
            return None
        s.cond(C.ADMITTED, True, "Admitted", verdict.message)
        s.set(nodes=verdict.topology.nodes, gpus=verdict.topology.total_gpus)
        if s.status.start_time is None:
            s.set(start_time=s.now)
        return verdict

    def within_deadline(self, job: TorchrunJob, s: st.StatusUpdate) -> bool:
        """False once `activeDeadlineSeconds` has passed (the job then fails); else a timer."""
        limit = job.spec.active_deadline_seconds
        if not limit or job.spec.suspend or s.status.start_time is None:
            return True
        remaining = (s.status.start_time + timedelta(seconds=limit) - s.now).total_seconds()
        if remaining > 0:
            s.timers.append(remaining)
            return True
        self.children.delete(JOBS, job)
        s.cond(C.RUNNING, False, "DeadlineExceeded", "the job stopped: activeDeadlineSeconds passed")
        message = f"the job ran longer than activeDeadlineSeconds ({limit}s, counted from its start)"
        s.cond(C.FAILED, True, "DeadlineExceeded", message)
        s.set(completion_time=s.now)
        self.ttl(job, s)
        return False

    def workspace_ready(self, job: TorchrunJob, admission: Admission, s: st.StatusUpdate) -> bool:
        """The PVCs exist and a code generation is synced (the one in use stays during a reload)."""
        state = self.workspace.ensure(job, admission.queue, admission.topology, s.status, s.now)
        if state.conflict is not None:
            self.name_conflict(s, state.conflict)
            return False
        if state.timer is not None:
            s.timers.append(state.timer)
        s.cond(C.WORKSPACE_READY, state.ready, state.reason, state.message)
        if state.ready and state.generation is not None:
            s.set(
                workspace_generation=state.generation,
                workspace_sha256=state.sha256,
                workspace_sync_time=state.synced_at,
            )
        return state.ready

    def ensure_etcd(self, job: TorchrunJob, queue: TorchrunQueue, s: st.StatusUpdate) -> EtcdState | None:
        """The managed etcd's state (READY for jobs without one); None on a name conflict."""
        if not job.spec.distributed.runs_managed_etcd:
            return READY
        got = self.etcd.ensure(job, queue, s.status.restarts)
        if isinstance(got, NameConflict):
            self.name_conflict(s, got)
            return None
        return got

    def name_conflict(self, s: st.StatusUpdate, conflict: NameConflict) -> None:
        s.cond(C.ADMITTED, False, NAME_CONFLICT, conflict.message)
        s.requeue = True

    # -- the Service and the worker Job -----------------------------------------------------------

    def ensure_service(self, job: TorchrunJob, s: st.StatusUpdate) -> bool:
        """The headless Service exists and is ours (its spec patched back if it drifted)."""
        desired = build_service(job)
        got = self.children.ensure(SERVICES, job, desired)
        if got.conflict is not None:
            self.name_conflict(s, got.conflict)
            return False
        assert got.obj is not None
        want, have = desired["spec"], got.obj.get("spec") or {}
        if any(have.get(k) != v for k, v in want.items() if k != "ports") or _ports(have) != _ports(want):
            patch = {"spec": {k: v for k, v in want.items() if k != "clusterIP"}}
            self.client.patch(SERVICES, job.name, patch, job.namespace)
        return True

    def ensure_workers(
        self,
        job: TorchrunJob,
        admission: Admission,
        s: st.StatusUpdate,
        updater: JobUpdater,
        etcd: EtcdState = READY,
    ) -> None:
        """The worker Job of the current restart exists (created only once the rendezvous `etcd`
        is Ready); its state becomes the job's conditions."""
        existing = self.children.get(JOBS, job)
        restart = s.status.restarts
        if (
            existing is not None
            and is_controlled_by(existing, job.metadata.uid)
            and _restart_of(existing) != restart
        ):
            # the previous attempt is going: its deletion event brings us back to create the next
            self.children.delete(JOBS, job)
            message = f"restart {restart}: waiting for the previous workers to stop"
            s.cond(C.RUNNING, False, "Restarting", message)
            return
        if existing is None and not etcd.ready:
            s.cond(C.RUNNING, False, etcd.reason, etcd.message)
            return
        suspend = job.spec.suspend or creates_suspended(admission.queue)
        manifest = self.worker_job_manifest(job, admission, restart=restart, suspend=suspend, status=s.status)
        # an elastic job runs the size the autoscaler chose (status.desiredNodes): elastic.py
        topo = self.elastic.ensure(job, admission.topology, manifest, existing, s)
        got = self.children.ensure(JOBS, job, manifest)
        if got.conflict is not None:
            self.name_conflict(s, got.conflict)
            return
        assert got.obj is not None
        if got.obj is existing:
            self.patch_suspend(job, admission.queue, got.obj)
        self.observe(job, topo, got.obj, s, updater)

    def worker_job_manifest(
        self,
        job: TorchrunJob,
        admission: Admission,
        *,
        restart: int,
        suspend: bool,
        status: TorchrunJobStatus,
    ) -> dict[str, Any]:
        """The worker Job with its storage: the code of the generation in use, checkpoints, datasets."""
        queue = admission.queue
        manifest = build_worker_job(
            job,
            queue,
            admission.topology,
            admission.command,
            restart=restart,
            suspend=suspend,
            cluster_domain=self.options.cluster_domain,
        )
        storage = worker_storage(
            job,
            queue,
            generation=status.workspace_generation,
            image=queue.spec.sync_image or self.options.sync_image,
            security_context=to_json(queue.spec.security_context),
        )
        return with_storage(manifest, storage, generation=status.workspace_generation)

    def patch_suspend(self, job: TorchrunJob, queue: TorchrunQueue, worker_job: Mapping[str, Any]) -> None:
        """`suspend` is the one field of the worker Job we change after creating it (the pod
        template and the size are immutable: `numNodes` cannot change, see the CRD)."""
        have = bool((worker_job.get("spec") or {}).get("suspend"))
        if job.spec.suspend and not have:
            want: bool | None = True
        elif not job.spec.suspend and have and not creates_suspended(queue):
            want = False
        else:
            want = None
        if want is not None:
            self.client.patch(JOBS, job.name, {"spec": {"suspend": want}}, job.namespace)

    def observe(
        self,
        job: TorchrunJob,
        topo: JobTopology,
        worker_job: Mapping[str, Any],
        s: st.StatusUpdate,
        updater: JobUpdater,
    ) -> None:
        s.set(workers=st.worker_counts(worker_job))
        if job.spec.suspend:
            message = "spec.suspend is true: workers removed, storage and status kept"
            s.cond(C.SUSPENDED, True, "Suspended", message)
            s.cond(C.RUNNING, False, "Suspended", "the job is suspended")
            return
        if find_condition(s.status.conditions, C.SUSPENDED) is not None:
            s.cond(C.SUSPENDED, False, "Resumed", "spec.suspend is false")
        outcome = st.worker_outcome(worker_job) or self.retriable_limit(job, worker_job, s)
        if outcome is None:
            self.reload(job, worker_job, s)
            self.running(job, topo, s, updater)
        elif outcome.succeeded:
            s.cond(C.RUNNING, False, "Completed", "the workers finished")
            s.cond(C.SUCCEEDED, True, "Succeeded", f"rank 0 succeeded ({outcome.reason})")
            s.set(completion_time=s.now)
            self.ttl(job, s)
        else:
            self.failed(job, outcome, s)

    def retriable_limit(
        self, job: TorchrunJob, worker_job: Mapping[str, Any], s: st.StatusUpdate
    ) -> st.Outcome | None:
        """Count this attempt's pod failures with a retriable exit code (podFailurePolicy ignores
        them, so the Job would recreate the pod forever); past the cap, the attempt has failed."""
        fp = job.spec.failure_policy
        pods = self.pods.list(job.namespace, {JOB_LABEL: job.name})
        seen = st.retriable_failures(pods, worker_job["metadata"]["uid"], fp.retriable_exit_codes)
        # failed pods may be cleaned up by someone else: the count never goes down within an attempt
        count = max(seen, s.status.retriable_failures)
        s.set(retriable_failures=count)
        if count <= fp.max_retriable_failures:
            return None
        codes = ", ".join(map(str, fp.retriable_exit_codes))
        message = (
            f"{count} pod failures with a retriable exit code ({codes}) in this attempt, more than "
            f"failurePolicy.maxRetriableFailures ({fp.max_retriable_failures})"
        )
        return st.Outcome(False, RETRIABLE_LIMIT, message)

    def reload(self, job: TorchrunJob, worker_job: Mapping[str, Any], s: st.StatusUpdate) -> None:
        """Hot reload: workers made before the generation in use was synced restart onto it."""
        evicted = self.workspace.roll(job, worker_job, s.status)
        if evicted:
            message = (
                f"workspace generation {s.status.workspace_generation} synced: restarting {evicted} worker "
                "pod(s) onto it together (the Job, PVCs and Service stay)"
            )
            self.recorder.event(
                self.jobs.get(job.name, job.namespace) or {}, NORMAL, "WorkspaceReloaded", message
            )

    def running(self, job: TorchrunJob, topo: JobTopology, s: st.StatusUpdate, updater: JobUpdater) -> None:
        ready = s.status.workers.ready
        if ready >= topo.nodes:
            s.cond(C.RUNNING, True, "AllWorkersRunning", f"{ready}/{topo.nodes} worker pods are running")
            if not updater.running_observed and job.metadata.creation_timestamp is not None:
                updater.running_observed = True
                self.metrics.submit_to_running.observe(
                    (s.now - job.metadata.creation_timestamp).total_seconds()
                )
            return
        blocked = st.unschedulable(self.pods.list(job.namespace, {JOB_LABEL: job.name}))
        if blocked:
            s.cond(C.RUNNING, False, "Unschedulable", blocked)
        else:
            s.cond(C.RUNNING, False, "WorkersStarting", f"{ready}/{topo.nodes} worker pods are running")

    def failed(self, job: TorchrunJob, outcome: st.Outcome, s: st.StatusUpdate) -> None:
        limit = min(job.spec.failure_policy.max_restarts, self.options.restart_limit)
        if outcome.permanent:
            s.cond(C.RUNNING, False, "Failed", outcome.message)
            message = f"a worker exited with a permanent exit code: {outcome.message}"
            s.cond(C.FAILED, True, "PermanentFailure", message)
        elif s.status.restarts < limit:
            # count first, delete on the next pass (brought by this status write's event): the
            # Job's restart annotation then no longer matches, so `ensure_workers` removes it — a
            # crash in between cannot lose the restart
            s.set(restarts=s.status.restarts + 1, retriable_failures=0)
            message = f"restart {s.status.restarts} of {limit} after: {outcome.reason}: {outcome.message}"
            s.cond(C.RUNNING, False, "Restarting", message)
            return
        else:
            s.cond(C.RUNNING, False, "Failed", outcome.message)
            message = (
                f"{outcome.reason}: {outcome.message} (whole-job restarts used: {s.status.restarts}/{limit})"
            )
            s.cond(C.FAILED, True, "RestartLimitExceeded" if limit else "WorkersFailed", message)
        if outcome.reason == RETRIABLE_LIMIT:
            self.children.delete(JOBS, job)  # its Job is still recreating pods: stop it
        s.set(completion_time=s.now)
        self.ttl(job, s)

    # -- finished jobs -------------------------------------------------------------------------

    def finished(self, job: TorchrunJob, s: st.StatusUpdate) -> None:
        if job.spec.distributed.runs_managed_etcd:
            self.etcd.remove(job, service=self.options.autoclean)  # nothing rendezvous any more
        worker = self.children.get(JOBS, job)
        if self.options.autoclean or (worker is not None and st.worker_outcome(worker) is None):
            # autoclean, or a worker Job still running pods for a job that is over (a deadline,
            # the retriable cap): a finished job never leaves workers behind
            self.children.delete(JOBS, job)
        if self.options.autoclean:
            self.children.delete(SERVICES, job)
            self.workspace.clean(job)
        self.ttl(job, s)

    def ttl(self, job: TorchrunJob, s: st.StatusUpdate) -> None:
        """Delete the job `ttlSecondsAfterFinished` after it finished; until then, a timer."""
        ttl = job.spec.ttl_seconds_after_finished
        if ttl is None:
            return
        done = s.status.completion_time or s.now
        remaining = (done + timedelta(seconds=ttl) - s.now).total_seconds()
        if remaining > 0:
            s.timers.append(remaining)
            return
        try:
            self.client.delete(TORCHRUNJOBS, job.name, job.namespace, uid=job.metadata.uid)
            log.info("deleted after ttlSecondsAfterFinished", key=job.key, ttl=ttl)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise


def _ports(spec: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    return sorted((p.get("name"), p.get("port")) for p in spec.get("ports") or ())


def _restart_of(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj["metadata"].get("annotations") or {}).get(RESTART_ANNOTATION, "0"))
    except ValueError:
        return -1
