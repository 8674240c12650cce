"""Generations: the job's code generation is synced into its workspace (docs/workspace.md).

What `ensure` guarantees, once the claims exist (`claims.py`), through `Children` (a same-named
sync pod the job does not control is a `NameConflict`, never touched):
- the generation the spec asks for (`spec.workspace.generation`) has its sync pod
  `<job>-sync-<G>`, made only once the workspace claim is in the cache (a pod the scheduler sees
  before its claim waits on the scheduler's backoff); the answer is a step (`steps.py`):
  `Proceed(WorkspaceState)` with `WorkspaceReady=True` (and the generation in use) once a
  generation the workers may run is synced, else a `wait` with `WorkspaceReady=False`. A
  generation counts as synced only when its pod succeeded **and** reported the sync program's
  marker for G. Until then the job waits (`Syncing`, or `ClaimNotBound` once the workspace claim
  has stayed unbound past the timeout: `WorkspaceClaims.binding`); a failed sync gives the sync
  program's reason. While an earlier generation runs, a new one that syncs or fails leaves it in
  use (`Reloading`, `ReloadFailed`); the workers move to it by `reload.py`;
- sync pods of generations older than the one in use are removed once it is synced (the pod of the
  generation in use stays, for `kubectl logs`). `clean` (autoclean of a finished job) removes the
  sync pods; `stop_sync` (any finished job) removes the sync pods still at work — an upload's
  would wait for code until --upload-timeout — and keeps the ones that ended, for `kubectl logs`.
  `syncing` says whether there is one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

import structlog

from controller.api import (
    JOB_LABEL,
    ROLE_LABEL,
    SYNC_ROLE,
    JobConditionType,
    JobTopology,
    TorchrunJob,
    TorchrunJobStatus,
    TorchrunQueue,
    WorkspaceSource,
)
from controller.api.labels import annotated_generation
from controller.api.reasons import Reason
from controller.meta import Obj, is_controlled_by
from controller.pods import is_live, unschedulable
from controller.rest.resources import PODS
from controller.torchrunjob.children import Children
from controller.torchrunjob.claims import WorkspaceClaims
from controller.torchrunjob.manifests.storage import has_workspace, workspace_claim_name
from controller.torchrunjob.manifests.syncpod import build_sync_pod, sync_pod_state
from controller.torchrunjob.steps import Decision, Observed, Proceed, Step, wait

log = structlog.get_logger("torchrunjob")


@dataclass(frozen=True)
class SyncSettings:
    image: str  # the sync image (the queue's syncImage wins)
    upload_timeout: float


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
    files: int | None = None  # the sync program's count of the generation's entries
    bytes: int | None = None  # and of its files' bytes, unpacked

    def decision(self) -> Decision:
        """What the pass records: the WorkspaceReady condition, and the generation in use (ready)
        or a wait (not ready)."""
        condition = Observed(JobConditionType.WORKSPACE_READY, self.ready, self.reason, self.message)
        if not self.ready:
            return wait(condition, requeue_after=self.timer)
        changes = {}
        if self.generation is not None:
            changes = {
                "workspace_generation": self.generation,
                "workspace_sha256": self.sha256,
                "workspace_sync_time": self.synced_at,
                "workspace_files": self.files,
                "workspace_bytes": self.bytes,
            }
        return Decision((condition,), changes)


class Generations:
    def __init__(self, children: Children, claims: WorkspaceClaims, settings: SyncSettings) -> None:
        self.children = children
        self.claims = claims
        self.settings = settings

    def ensure(
        self,
        job: TorchrunJob,
        queue: TorchrunQueue,
        topo: JobTopology,
        claim: Obj | None,
        status: TorchrunJobStatus,
        now: datetime,
    ) -> Step[WorkspaceState]:
        """The module doc's step; `claim`: the workspace claim as the cache had it before this pass."""
        if not has_workspace(job):
            message = "workspace.source is none: the code is in the image"
            return _proceed(WorkspaceState(True, Reason.NO_WORKSPACE, message))
        if claim is None:
            # the sync pod comes on the pass the claim's add event brings: a pod that reaches the
            # scheduler before its claim is found unschedulable ("not found"), and kube-scheduler
            # may not look at it again for minutes (seen in the test bed: > 90 s)
            message = f"waiting for PVC {workspace_claim_name(job.name)} to bind"
            return WorkspaceState(False, Reason.SYNCING, message).decision()
        in_use = _in_use(status)
        desired = job.spec.workspace.generation
        if in_use is not None and status.workspace_generation >= desired:
            self._remove_sync_pods(job, older_than=status.workspace_generation)
            return _proceed(in_use)
        image = queue.spec.sync_image or self.settings.image
        pod = build_sync_pod(
            job, queue, topo, generation=desired, image=image, upload_timeout=self.settings.upload_timeout
        )
        got = self.children.ensure(PODS, job, pod)
        if not isinstance(got, Proceed):
            return got
        state = self._observe(job, got.value, desired, in_use, now)
        return _proceed(state) if state.ready else state.decision()

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
                files=r.files,
                bytes=r.bytes,
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
        binding = self.claims.binding(job, now)
        if binding is not None:
            return WorkspaceState(False, binding.reason, binding.message, timer=binding.timer)
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
        return WorkspaceState(False, Reason.SYNCING, what)

    # -- clean-up --------------------------------------------------------------------------

    def sync_pods(self, job: TorchrunJob) -> list[Obj]:
        pods = self.children.listers[PODS].list(job.namespace, {JOB_LABEL: job.name, ROLE_LABEL: SYNC_ROLE})
        return [p for p in pods if is_controlled_by(p, job.metadata.uid)]

    def _remove_sync_pods(self, job: TorchrunJob, *, older_than: int | None = None) -> None:
        for pod in self.sync_pods(job):
            generation = annotated_generation(pod)
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
        """Autoclean of a finished job: its sync pods go."""
        self._remove_sync_pods(job)


def _proceed(state: WorkspaceState) -> Proceed[WorkspaceState]:
    return Proceed(state, state.decision())


def _in_use(status: TorchrunJobStatus) -> WorkspaceState | None:
    """The generation the workers run, once one was synced (git, s3 and pvc report no SHA-256)."""
    if status.workspace_sync_time is None:
        return None
    g = status.workspace_generation
    message = _in_use_message(g, status.workspace_sha256)
    return WorkspaceState(
        True,
        Reason.SYNCED,
        message,
        g,
        status.workspace_sha256,
        status.workspace_sync_time,
        files=status.workspace_files,
        bytes=status.workspace_bytes,
    )


def _in_use_message(generation: int, sha256: str | None) -> str:
    checksum = f" (sha256 {sha256[:12]})" if sha256 else ""
    return f"generation {generation} of the code is in use{checksum}"


def _replace(state: WorkspaceState, reason: str, message: str) -> WorkspaceState:
    return dataclasses.replace(state, ready=True, reason=reason, message=message, timer=None)
