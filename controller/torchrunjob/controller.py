"""The TorchrunJob reconciler: level-based, idempotent, one key at a time.

`reconcile(key)` reads the job from the lister, and in order: reports a finished job's TTL and
autoclean; waits (with a condition) until its queue exists and is Ready; validates it against
the queue; enforces the active deadline; prepares the workspace; makes the Service and the
worker Job exist as the pure builders describe (creating what is missing, patching only the
mutable fields that differ); turns the worker Job's state into conditions — restarting the whole
job on a retriable failure while restarts remain — and writes status only when it changed.
Timers (TTL, deadline) come back as `Result(requeue_after=...)` for the exact moment.
Invalid specs become a condition and are not retried; API conflicts are retried with a fresh read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import structlog

from controller.api import (
    ConditionStatus,
    InvalidObjectError,
    JobConditionType,
    JobTopology,
    QueueConditionType,
    TorchrunJob,
    TorchrunJobStatus,
    TorchrunQueue,
    WorkspaceSource,
    find_condition,
    is_true,
    resolve_topology,
    set_condition,
    to_json,
    validate_job,
)
from controller.api.resources import TORCHRUNJOBS
from controller.cache import Lister, thaw
from controller.errors import TransientError
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import JOBS, SERVICES, Resource
from controller.runtime import Result
from controller.runtime.events import NORMAL, WARNING, EventRecorder
from controller.runtime.status import update_status
from controller.torchrunjob import status as st
from controller.torchrunjob.builders import (
    JOB_LABEL,
    RESTART_ANNOTATION,
    build_service,
    build_worker_job,
)
from controller.torchrunjob.launch import LaunchError, ParsedCommand, parse_command
from controller.torchrunjob.podgroups import PodGroups
from controller.torchrunjob.scheduling import creates_suspended
from controller.torchrunjob.updater import JobTracker, JobUpdater

log = structlog.get_logger("torchrunjob")

C = JobConditionType
_WARNING_REASONS = frozenset(
    {
        "QueueNotFound",
        "QueueNotReady",
        "InvalidSpec",
        "InvalidCommand",
        "Unschedulable",
        "Restarting",
        "WorkspaceUnsupported",
        "JobConflict",
        "ManagedEtcdUnsupported",
    }
)


# transitions too routine to be worth an Event (they stay visible in the conditions)
_QUIET_REASONS = frozenset({"NoWorkspace", "WorkersStarting", "Completed"})


@dataclasses.dataclass
class Options:
    autoclean: bool = False
    restart_limit: int = 10


class _Stop(Exception):  # noqa: N818 - control flow: status is final for this pass
    """End this reconcile after writing status."""

    def __init__(self, requeue_after: float | None = None) -> None:
        super().__init__()
        self.requeue_after = requeue_after


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
        recorder: EventRecorder,
        options: Options | None = None,
        metrics: ControllerMetrics | None = None,
        pod_groups: PodGroups | None = None,
    ) -> None:
        self.client = client
        self.jobs = jobs
        self.queues = queues
        self.worker_jobs = worker_jobs
        self.services = services
        self.pods = pods
        self.recorder = recorder
        self.options = options or Options()
        self.metrics = metrics or client.metrics
        self.tracker = JobTracker()
        self.pod_groups = pod_groups or PodGroups(client, worker_jobs=worker_jobs)

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
            self._write(raw, self._invalid_status(raw, str(exc)))
            return None
        updater = self.tracker.get_or_create(key, job.metadata.uid)
        with updater.lock:
            return _Pass(self, raw, job, updater).run()

    def _invalid_status(self, raw: Mapping[str, Any], message: str) -> dict[str, Any]:
        status: dict[str, Any] = thaw(raw.get("status") or {})
        status["phase"] = "Pending"
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != C.ADMITTED] + [
            {
                "type": C.ADMITTED,
                "status": "False",
                "reason": "InvalidSpec",
                "message": message,
                "lastTransitionTime": st.now().strftime("%Y-%m-%dT%H:%M:%SZ"),
                "observedGeneration": raw["metadata"].get("generation", 0),
            }
        ]
        return status

    def _write(self, raw: Mapping[str, Any], status: dict[str, Any]) -> None:
        update_status(self.client, TORCHRUNJOBS, raw, status)

    # -- writes (each only when needed) -----------------------------------------------------------

    def _create(self, resource: Resource, manifest: dict[str, Any]) -> Mapping[str, Any]:
        try:
            created: Mapping[str, Any] = self.client.create(resource, manifest)
            log.info(
                "created",
                resource=resource.key,
                key=f"{manifest['metadata']['namespace']}/{manifest['metadata']['name']}",
            )
            return created
        except ApiError as exc:
            if exc.already_exists:  # our cache is behind; the next event brings it
                raise TransientError(
                    f"{resource.kind} exists but is not in the cache yet", requeue_after=0.5
                ) from exc
            raise

    def _ensure_service(self, job: TorchrunJob) -> None:
        desired = build_service(job)
        existing = self.services.get(job.name, job.namespace)
        if existing is None:
            self._create(SERVICES, desired)
            return
        if not _owned_by(existing, job.metadata.uid):
            return  # not ours: never touch it (the Job step reports the conflict)
        want, have = desired["spec"], existing.get("spec") or {}
        if any(have.get(k) != v for k, v in want.items() if k != "ports") or _ports(have) != _ports(want):
            patch = {"spec": {k: v for k, v in want.items() if k != "clusterIP"}}
            self.client.patch(SERVICES, job.name, patch, job.namespace)

    def _patch_mutable(
        self, existing: Mapping[str, Any], job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology
    ) -> None:
        """Only suspend and parallelism of a Job can change; the pod template is immutable."""
        spec = existing.get("spec") or {}
        patch: dict[str, Any] = {}
        if job.spec.suspend and not spec.get("suspend"):
            patch["suspend"] = True
        elif not job.spec.suspend and spec.get("suspend") and not creates_suspended(queue):
            patch["suspend"] = False
        if not topo.elastic and spec.get("parallelism") != topo.nodes:
            patch["parallelism"] = topo.nodes
        if patch:
            self.client.patch(JOBS, job.name, {"spec": patch}, job.namespace)

    def _delete_workers(self, job: TorchrunJob) -> None:
        self._delete(JOBS, job)

    def _delete(self, resource: Resource, job: TorchrunJob) -> None:
        existing = (self.worker_jobs if resource == JOBS else self.services).get(job.name, job.namespace)
        if (
            existing is None
            or existing["metadata"].get("deletionTimestamp")
            or not _owned_by(existing, job.metadata.uid)
        ):
            return
        try:
            self.client.delete(
                resource,
                job.name,
                job.namespace,
                propagation_policy="Background",
                uid=existing["metadata"].get("uid"),
            )
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise


def _ports(spec: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    return sorted((p.get("name"), p.get("port")) for p in spec.get("ports") or ())


class _Pass:
    """One reconcile of one job: holds the evolving status and the timers it asks for."""

    def __init__(
        self, r: TorchrunJobReconciler, raw: Mapping[str, Any], job: TorchrunJob, up: JobUpdater
    ) -> None:
        self.r = r
        self.raw = raw
        self.job = job
        self.up = up
        self.now = st.now()
        self.status: TorchrunJobStatus = job.status
        self.timers: list[float] = []

    # -- condition helpers ---------------------------------------------------------------------

    def cond(self, type_: str, status: bool, reason: str, message: str) -> None:
        conds = set_condition(
            self.status.conditions, type_, status, reason, message, self.job.metadata.generation, self.now
        )
        self.status = dataclasses.replace(self.status, conditions=conds)

    def set(self, **changes: Any) -> None:
        self.status = dataclasses.replace(self.status, **changes)

    def finish(self) -> Result | None:
        self.set(phase=st.phase_of(self.status.conditions), observed_generation=self.job.metadata.generation)
        new = to_json(self.status)
        old_conditions = self.job.status.conditions
        self.r._write(self.raw, new)
        for cond in st.changed_conditions(old_conditions, self.status.conditions):
            warn = cond.reason in _WARNING_REASONS or (
                cond.type == C.FAILED and cond.status is ConditionStatus.TRUE
            )
            if (cond.status is ConditionStatus.TRUE or warn) and cond.reason not in _QUIET_REASONS:
                self.r.recorder.event(self.raw, WARNING if warn else NORMAL, cond.reason, cond.message)
        if new != thaw(self.raw.get("status") or {}):
            log.info("status", key=self.job.key, phase=self.status.phase.value, restarts=self.status.restarts)
        return Result(requeue_after=min(self.timers)) if self.timers else None

    # -- the steps -----------------------------------------------------------------------------

    def run(self) -> Result | None:
        try:
            if is_true(self.status.conditions, C.SUCCEEDED) or is_true(self.status.conditions, C.FAILED):
                self.finished()
            else:
                queue, topo, parsed = self.admit()
                self.deadline()
                self.workspace(queue)
                self.r._ensure_service(self.job)
                self.r.pod_groups.ensure(self.job, queue, topo)
                self.workers(queue, topo, parsed)
        except _Stop as stop:
            if stop.requeue_after is not None:
                self.timers.append(stop.requeue_after)
        return self.finish()

    def admit(self) -> tuple[TorchrunQueue, JobTopology, ParsedCommand]:
        qname = self.job.spec.job_queue
        raw_queue = self.r.queues.get(qname)
        if raw_queue is None:
            self.cond(
                C.ADMITTED,
                False,
                "QueueNotFound",
                f"TorchrunQueue {qname} does not exist; the job starts when it is created",
            )
            raise _Stop
        queue = TorchrunQueue.from_json(raw_queue)
        if not is_true(queue.status.conditions, QueueConditionType.READY):
            ready = next((c for c in queue.status.conditions if c.type == QueueConditionType.READY), None)
            why = f": {ready.reason}: {ready.message}" if ready else " yet"
            self.cond(C.ADMITTED, False, "QueueNotReady", f"TorchrunQueue {qname} is not Ready{why}")
            raise _Stop
        errors = validate_job(self.job, queue)
        if errors:
            self.cond(C.ADMITTED, False, "InvalidSpec", "; ".join(str(e) for e in errors))
            raise _Stop
        try:
            parsed = parse_command(self.job.spec.command)
        except LaunchError as exc:
            self.cond(C.ADMITTED, False, "InvalidCommand", str(exc))
            raise _Stop from exc
        if self.job.spec.distributed.managed_etcd:
            self.cond(
                C.ADMITTED,
                False,
                "ManagedEtcdUnsupported",
                "spec.distributed.managedEtcd: this controller version does not run an etcd for the job "
                "yet; give rdzvEndpoint (an etcd serving the v2 API) or use rdzvBackend c10d",
            )
            raise _Stop
        topo = resolve_topology(self.job.spec, queue.spec.node_resources)
        self.cond(
            C.ADMITTED,
            True,
            "Admitted",
            f"queue {qname}: {topo.nodes} node(s) × {topo.procs_per_node} process(es), "
            f"{topo.total_gpus} GPU(s)",
        )
        self.set(nodes=topo.nodes, gpus=topo.total_gpus)
        if self.status.start_time is None:
            self.set(start_time=self.now)
        return queue, topo, parsed

    def deadline(self) -> None:
        limit = self.job.spec.active_deadline_seconds
        if not limit or self.job.spec.suspend or self.status.start_time is None:
            return
        remaining = (self.status.start_time + timedelta(seconds=limit) - self.now).total_seconds()
        if remaining > 0:
            self.timers.append(remaining)
            return
        self.r._delete_workers(self.job)
        self.cond(C.RUNNING, False, "DeadlineExceeded", "the job stopped: activeDeadlineSeconds passed")
        self.cond(
            C.FAILED,
            True,
            "DeadlineExceeded",
            f"the job ran longer than activeDeadlineSeconds ({limit}s, counted from its start)",
        )
        self.set(completion_time=self.now)
        self.ttl()
        raise _Stop

    def workspace(self, queue: TorchrunQueue) -> None:
        source = self.job.spec.workspace.source
        if source == WorkspaceSource.NONE:
            self.cond(
                C.WORKSPACE_READY, True, "NoWorkspace", "workspace.source is none: the code is in the image"
            )
            return
        # The sync pod (upload, git, s3, pvc) is not part of this controller version yet.
        self.cond(
            C.WORKSPACE_READY,
            False,
            "WorkspaceUnsupported",
            f"workspace.source {source.value} is not supported by this controller version yet; "
            "use workspace.source: none with the code in the image",
        )
        raise _Stop

    def workers(self, queue: TorchrunQueue, topo: JobTopology, parsed: ParsedCommand) -> None:
        job = self.job
        existing = self.r.worker_jobs.get(job.name, job.namespace)
        if existing is not None and not _owned_by(existing, job.metadata.uid):
            self.cond(
                C.ADMITTED,
                False,
                "JobConflict",
                f"a batch/v1 Job named {job.name} exists and is not this job's",
            )
            raise _Stop
        restart = self.status.restarts
        if existing is not None and _restart_of(existing) != restart:
            # the previous attempt is being deleted: wait for it before creating the next
            if not existing["metadata"].get("deletionTimestamp"):
                self.r._delete_workers(job)
            self.cond(
                C.RUNNING, False, "Restarting", f"restart {restart}: waiting for the previous workers to stop"
            )
            raise _Stop(requeue_after=1.0)
        if existing is None:
            suspend = job.spec.suspend or creates_suspended(queue)
            manifest = build_worker_job(job, queue, topo, parsed, restart=restart, suspend=suspend)
            existing = self.r._create(JOBS, manifest)
        else:
            self.r._patch_mutable(existing, job, queue, topo)
        self.observe(existing, topo)

    def observe(self, worker_job: Mapping[str, Any], topo: JobTopology) -> None:
        self.set(workers=st.worker_counts(worker_job))
        outcome = st.worker_outcome(worker_job)
        if self.job.spec.suspend:
            self.cond(
                C.SUSPENDED,
                True,
                "Suspended",
                "spec.suspend is true: workers removed, storage and status kept",
            )
            self.cond(C.RUNNING, False, "Suspended", "the job is suspended")
            return
        if find_condition(self.status.conditions, C.SUSPENDED) is not None:
            self.cond(C.SUSPENDED, False, "Resumed", "spec.suspend is false")
        if outcome is None:
            self.running(worker_job, topo)
        elif outcome.succeeded:
            self.cond(C.RUNNING, False, "Completed", "the workers finished")
            self.cond(C.SUCCEEDED, True, "Succeeded", f"rank 0 succeeded ({outcome.reason})")
            self.set(completion_time=self.now)
            self.ttl()
        else:
            self.failed(outcome)

    def running(self, worker_job: Mapping[str, Any], topo: JobTopology) -> None:
        counts = self.status.workers
        if counts.ready >= topo.nodes:
            self.cond(
                C.RUNNING, True, "AllWorkersRunning", f"{counts.ready}/{topo.nodes} worker pods are running"
            )
            if not self.up.running_observed and self.job.metadata.creation_timestamp is not None:
                self.up.running_observed = True
                self.r.metrics.submit_to_running.observe(
                    (self.now - self.job.metadata.creation_timestamp).total_seconds()
                )
            return
        pods = self.r.pods.list(self.job.namespace, {JOB_LABEL: self.job.name})
        blocked = st.unschedulable(pods)
        if blocked:
            self.cond(C.RUNNING, False, "Unschedulable", blocked)
        else:
            self.cond(
                C.RUNNING, False, "WorkersStarting", f"{counts.ready}/{topo.nodes} worker pods are running"
            )

    def failed(self, outcome: st.Outcome) -> None:
        limit = min(self.job.spec.failure_policy.max_restarts, self.r.options.restart_limit)
        if outcome.permanent:
            self.cond(C.RUNNING, False, "Failed", outcome.message)
            self.cond(
                C.FAILED,
                True,
                "PermanentFailure",
                f"a worker exited with a permanent exit code: {outcome.message}",
            )
        elif self.status.restarts < limit:
            # count first, delete next pass: the Job's restart annotation no longer matches the
            # count, so `workers()` removes it — a crash in between cannot lose the restart
            self.set(restarts=self.status.restarts + 1)
            self.cond(
                C.RUNNING,
                False,
                "Restarting",
                f"restart {self.status.restarts} of {limit} after: {outcome.reason}: {outcome.message}",
            )
            raise _Stop(requeue_after=0.0)
        else:
            reason = "RestartLimitExceeded" if limit else "WorkersFailed"
            self.cond(C.RUNNING, False, "Failed", outcome.message)
            self.cond(
                C.FAILED,
                True,
                reason,
                f"{outcome.reason}: {outcome.message} "
                f"(whole-job restarts used: {self.status.restarts}/{limit})",
            )
        if is_true(self.status.conditions, C.FAILED):
            self.set(completion_time=self.now)
            self.ttl()

    # -- finished jobs -------------------------------------------------------------------------

    def finished(self) -> None:
        if self.r.options.autoclean:
            self.r._delete_workers(self.job)
            self.r._delete(SERVICES, self.job)
        self.ttl()

    def ttl(self) -> None:
        ttl = self.job.spec.ttl_seconds_after_finished
        done = self.status.completion_time or self.now
        if ttl is None:
            return
        remaining = (done + timedelta(seconds=ttl) - self.now).total_seconds()
        if remaining > 0:
            self.timers.append(remaining)
            return
        try:
            self.r.client.delete(TORCHRUNJOBS, self.job.name, self.job.namespace, uid=self.job.metadata.uid)
            log.info("deleted after ttlSecondsAfterFinished", key=self.job.key, ttl=ttl)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise
        raise _Stop


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or ())


def _restart_of(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj["metadata"].get("annotations") or {}).get(RESTART_ANNOTATION, "0"))
    except ValueError:
        return -1
