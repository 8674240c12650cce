"""WorkspaceSync: a job's storage exists and its code generation is synced (docs/workspace.md).

What `ensure` guarantees, through `Children` (a same-named object the job does not control is
never adopted, changed or deleted — it is a `NameConflict`):
- the PVCs exist: `<job>-workspace` for every source but `none`, `<job>-checkpoints` when the
  queue enables them. A persisted checkpoints claim left by an earlier job of the same name is
  mounted again, untouched;
- the generation the spec asks for (`spec.workspace.generation`) has its sync pod
  `<job>-sync-<G>`, made only once the workspace claim is in the cache (a pod the scheduler sees
  before its claim waits on the scheduler's backoff); the answer is a step (`steps.py`):
  `Proceed(WorkspaceState)` once a generation the workers may run is synced, else a `Wait` with
  `WorkspaceReady=False`. A generation counts as synced only when its pod succeeded **and**
  reported the sync program's marker for G. Until then the job waits (`Syncing`, or
  `ClaimNotBound` once the workspace claim has stayed unbound past the timeout, quoting the
  claim's Events); a failed sync gives the sync program's reason. While an earlier generation
  runs, a new one that syncs or fails leaves it in use (`Reloading`, `ReloadFailed`);
- sync pods of generations older than the one in use are removed once it is synced (the pod of the
  generation in use stays, for `kubectl logs`). `roll` restarts (evicts) the worker pods made
  before the generation in use was synced, so all workers move to it together without touching the
  Job, the PVCs or the Service: evicted pods carry the DisruptionTarget condition, which the
  worker Job's podFailurePolicy ignores. `clean` (autoclean of a finished job) removes the sync
  pods and the workspace claim; `stop_sync` (any finished job) removes the sync pods still at work
  — an upload's would wait for code until --upload-timeout — and keeps the ones that ended, for
  `kubectl logs`. `syncing` says whether there is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import structlog

from controller.api import (
    GENERATION_ANNOTATION,
    JOB_LABEL,
    ROLE_LABEL,
    SYNC_ROLE,
    JobConditionType,
    JobTopology,
    TorchrunJob,
    TorchrunJobStatus,
    TorchrunQueue,
    WorkspaceSource,
    parse_time,
)
from controller.api.reasons import Reason
from controller.meta import Obj, is_controlled_by
from controller.pods import is_live, unschedulable
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import EVENTS, PODS, PVCS
from controller.torchrunjob.children import Children, NameConflict, conflict_wait
from controller.torchrunjob.evictions import evict_live_workers
from controller.torchrunjob.manifests.storage import (
    build_checkpoints_pvc,
    build_workspace_pvc,
    checkpoints_claim_name,
    has_workspace,
    is_reattachable,
    workspace_claim_name,
)
from controller.torchrunjob.manifests.syncpod import build_sync_pod, sync_pod_state
from controller.torchrunjob.steps import Observed, Proceed, Step, Wait

log = structlog.get_logger("torchrunjob")


@dataclass(frozen=True)
class WorkspaceSettings:
    image: str  # the sync image (the queue's syncImage wins)
    upload_timeout: float
    claim_bind_timeout: float


@dataclass(frozen=True)
class WorkspaceState:
    """`ready`: a generation is synced and the workers may run it (`generation`, `sha256`,
    `synced_at`); `reason`/`message` are the WorkspaceReady condition's; `timer`: seconds until
    this answer may change by itself (the claim-bind deadline)."""

    ready: bool
    reason: str
    message: str
    generation: int | None = None
    sha256: str | None = None
    synced_at: datetime | None = None
    timer: float | None = None


class WorkspaceSync:
    def __init__(self, client: RESTClient, children: Children, settings: WorkspaceSettings) -> None:
        self.client = client
        self.children = children
        self.settings = settings

    # -- claims ------------------------------------------------------------------------------

    def ensure_claims(self, job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology) -> Step[None]:
        if has_workspace(job):
            got = self.children.ensure(PVCS, job, build_workspace_pvc(job, queue, topo))
            if not isinstance(got, Proceed):
                return got
        if queue.spec.storage.checkpoints.enabled:
            return self._ensure_checkpoints(job, queue, topo)
        return Proceed(None)

    def _ensure_checkpoints(self, job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology) -> Step[None]:
        desired = build_checkpoints_pvc(job, queue, topo)
        if not queue.spec.storage.checkpoints.persist:
            got = self.children.ensure(PVCS, job, desired)
            return got if not isinstance(got, Proceed) else Proceed(None)
        existing = self.children.get(PVCS, job, checkpoints_claim_name(job.name))
        if existing is None:
            try:
                self.client.create(PVCS, desired)
                log.info("created persistent checkpoints claim", key=job.key)
                return Proceed(None)
            except ApiError as exc:
                if not exc.already_exists:
                    raise
            existing = self.client.get(PVCS, checkpoints_claim_name(job.name), job.namespace)
        if is_reattachable(existing, job):
            return Proceed(None)
        meta = existing["metadata"]
        return conflict_wait(
            NameConflict("PersistentVolumeClaim", meta.get("namespace", ""), meta["name"], False)
        )

    # -- the generation --------------------------------------------------------------------------

    def ensure(
        self,
        job: TorchrunJob,
        queue: TorchrunQueue,
        topo: JobTopology,
        status: TorchrunJobStatus,
        now: datetime,
    ) -> Step[WorkspaceState]:
        claim_seen = self.children.get(PVCS, job, workspace_claim_name(job.name)) is not None
        claims = self.ensure_claims(job, queue, topo)
        if not isinstance(claims, Proceed):
            return claims
        if not has_workspace(job):
            message = "workspace.source is none: the code is in the image"
            return Proceed(WorkspaceState(True, Reason.NO_WORKSPACE, message))
        if not claim_seen:
            # the sync pod comes on the pass the claim's add event brings: a pod that reaches the
            # scheduler before its claim is found unschedulable ("not found"), and kube-scheduler
            # may not look at it again for minutes (seen in the test bed: > 90 s)
            message = f"waiting for PVC {workspace_claim_name(job.name)} to bind"
            return Wait(Observed(JobConditionType.WORKSPACE_READY, False, Reason.SYNCING, message))
        in_use = _in_use(status)
        desired = job.spec.workspace.generation
        if in_use is not None and status.workspace_generation >= desired:
            self._remove_sync_pods(job, older_than=status.workspace_generation)
            return Proceed(in_use)
        image = queue.spec.sync_image or self.settings.image
        pod = build_sync_pod(
            job, queue, topo, generation=desired, image=image, upload_timeout=self.settings.upload_timeout
        )
        got = self.children.ensure(PODS, job, pod)
        if not isinstance(got, Proceed):
            return got
        state = self._observe(job, got.value, desired, in_use, now)
        if state.ready:
            return Proceed(state)
        condition = Observed(JobConditionType.WORKSPACE_READY, False, state.reason, state.message)
        return Wait(condition, requeue_after=state.timer)

    def _observe(
        self, job: TorchrunJob, pod: Obj, desired: int, in_use: WorkspaceState | None, now: datetime
    ) -> WorkspaceState:
        name = pod["metadata"]["name"]
        state = sync_pod_state(pod, desired)
        if state.synced and state.result is not None:
            r = state.result
            log.info(
                "workspace synced", key=job.key, generation=desired, pod=name, files=r.files, bytes=r.bytes
            )
            return WorkspaceState(
                True,
                Reason.SYNCED,
                _in_use_message(desired, r.sha256),
                desired,
                r.sha256,
                state.finished_at or now,
            )
        if state.done and state.result is not None:
            failure = f"generation {desired} did not sync ({state.result.reason}): {state.result.message}"
            if in_use is not None:
                message = f"{failure}; generation {in_use.generation} stays in use"
                return _replace(in_use, Reason.RELOAD_FAILED, message)
            return WorkspaceState(False, state.result.reason or Reason.SYNC_FAILED, f"{failure} (pod {name})")
        waiting = self._waiting(job, pod, desired, now)
        if in_use is not None:
            return _replace(
                in_use, Reason.RELOADING, f"generation {in_use.generation} in use; {waiting.message}"
            )
        return waiting

    def _waiting(self, job: TorchrunJob, pod: Obj, generation: int, now: datetime) -> WorkspaceState:
        """Syncing (with what it waits for), or ClaimNotBound past the claim's bind deadline."""
        claim_name = workspace_claim_name(job.name)
        claim = self.children.get(PVCS, job, claim_name)
        timer = None
        if claim is not None and (claim.get("status") or {}).get("phase") != "Bound":
            created = parse_time(claim["metadata"]["creationTimestamp"])
            left = self.settings.claim_bind_timeout - (now - created).total_seconds()
            if left <= 0:
                events = self._claim_events(job, claim_name)
                klass = claim["spec"].get("storageClassName") or "<cluster default>"
                message = (
                    f"PVC {claim_name} is not bound after {self.settings.claim_bind_timeout:g}s"
                    f" (storage class {klass}): {events}"
                )
                return WorkspaceState(False, Reason.CLAIM_NOT_BOUND, message)
            timer = left
            return WorkspaceState(False, Reason.SYNCING, f"waiting for PVC {claim_name} to bind", timer=timer)
        name = pod["metadata"]["name"]
        blocked = unschedulable([pod])
        if blocked:
            return WorkspaceState(False, Reason.SYNCING, f"sync pod {name} cannot be scheduled: {blocked}")
        if job.spec.workspace.source is WorkspaceSource.UPLOAD:
            what = (
                f"waiting for the upload of generation {generation} into pod {name} "
                "(kubectl torchrun submit / kubectl torchrun sync)"
            )
        else:
            what = f"pod {name} is fetching generation {generation} from {job.spec.workspace.source.value}"
        return WorkspaceState(False, Reason.SYNCING, what, timer=timer)

    def _claim_events(self, job: TorchrunJob, claim_name: str) -> str:
        selector = f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={claim_name}"
        try:
            items = self.client.list(EVENTS, job.namespace, field_selector=selector).get("items") or []
        except ApiError as exc:
            return f"(its events could not be read: {exc.reason})"
        items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        quoted = [f"{e.get('reason')}: {e.get('message')}" for e in items[-3:]]
        return "; ".join(quoted) if quoted else "no events (is there a provisioner for this storage class?)"

    # -- clean-up and hot reload ------------------------------------------------------------

    def sync_pods(self, job: TorchrunJob) -> list[Obj]:
        pods = self.children.listers[PODS].list(job.namespace, {JOB_LABEL: job.name, ROLE_LABEL: SYNC_ROLE})
        return [p for p in pods if is_controlled_by(p, job.metadata.uid)]

    def _remove_sync_pods(self, job: TorchrunJob, *, older_than: int | None = None) -> None:
        for pod in self.sync_pods(job):
            generation = _generation_of(pod)
            if older_than is None or generation < older_than:
                self.children.delete(PODS, job, pod["metadata"]["name"])

    def syncing(self, job: TorchrunJob) -> bool:
        """A sync pod of the job is still at work (neither ended nor being deleted)."""
        return any(is_live(pod) for pod in self.sync_pods(job))

    def stop_sync(self, job: TorchrunJob) -> None:
        """A finished job runs no code: its sync pods still at work go (those that ended stay)."""
        for pod in self.sync_pods(job):
            if is_live(pod):
                self.children.delete(PODS, job, pod["metadata"]["name"])

    def clean(self, job: TorchrunJob) -> None:
        """Autoclean of a finished job: sync pods and the workspace claim go (checkpoints stay)."""
        self._remove_sync_pods(job)
        self.children.delete(PVCS, job, workspace_claim_name(job.name))

    def roll(self, job: TorchrunJob, worker_job: Obj, status: TorchrunJobStatus) -> int:
        """Evict the live worker pods made before the generation in use was synced; how many."""
        made_for = _generation_of(worker_job)
        if status.workspace_sync_time is None:
            return 0
        if status.workspace_generation <= made_for:
            return 0
        synced_at = status.workspace_sync_time
        pods = self.children.listers[PODS].list(job.namespace, {JOB_LABEL: job.name})
        return evict_live_workers(
            self.client,
            pods,
            worker_job,
            lambda pod: parse_time(pod["metadata"]["creationTimestamp"]) <= synced_at,
        )


def _generation_of(obj: Obj) -> int:
    try:
        return int((obj["metadata"].get("annotations") or {}).get(GENERATION_ANNOTATION, "0"))
    except ValueError:
        return 0


def _in_use(status: TorchrunJobStatus) -> WorkspaceState | None:
    """The generation the workers run, once one was synced (git, s3 and pvc report no SHA-256)."""
    if status.workspace_sync_time is None:
        return None
    g = status.workspace_generation
    message = _in_use_message(g, status.workspace_sha256)
    return WorkspaceState(
        True, Reason.SYNCED, message, g, status.workspace_sha256, status.workspace_sync_time
    )


def _in_use_message(generation: int, sha256: str | None) -> str:
    checksum = f" (sha256 {sha256[:12]})" if sha256 else ""
    return f"generation {generation} of the code is in use{checksum}"


def _replace(state: WorkspaceState, reason: str, message: str) -> WorkspaceState:
    return WorkspaceState(True, reason, message, state.generation, state.sha256, state.synced_at)
