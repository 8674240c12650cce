"""Pure builders of a job's storage (docs/workspace.md): its PVCs and how worker pods mount them.

- `build_workspace_pvc`: `<job>-workspace`, `sizePerGPU × GPUs of the job` (a CPU-only node counts
  as one GPU; an elastic job is sized for `maxNodes`), the queue's class and access modes, owned
  by the job. Only sources other than `none` have one.
- `build_checkpoints_pvc`: `<job>-checkpoints` when the queue enables checkpoints; owned by the
  job, or with `persist: true` not owned at all and labelled `torchrun.ai/persist=true`, so that
  deleting the job, the garbage collector and `--autoclean` all leave it alone, and a later job
  of the same name mounts it again (`is_reattachable`).
- `worker_storage`: what the worker pod template gains — the init container that copies the
  newest synced generation (≥ the one in use when the Job was made) from the workspace PVC into
  an emptyDir at `workspace.mountPath`, and the checkpoints and datasets mounts — returned as a
  fragment that `worker.build_worker_job` composes (nothing is applied in place).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.api import (
    JOB_LABEL,
    PERSIST_LABEL,
    JobTopology,
    TorchrunJob,
    TorchrunQueue,
    WorkspaceSource,
)
from controller.api.labels import SYNC_ROLE, WORKER_ROLE
from controller.api.quantity import Quantity
from controller.sync.protocol import copy_argv
from controller.torchrunjob.manifests.common import object_metadata, training_security_context

WORKSPACE_VOLUME = "workspace"
CODE_VOLUME = "code"
CHECKPOINTS_VOLUME = "checkpoints"
DATASETS_VOLUME = "datasets"
WORKSPACE_MOUNT = "/workspace"  # where the sync pod and the init container see the workspace PVC
INIT_CONTAINER = "workspace"
# the controller's own image (config/manager/deployment.yaml), which has the sync program
DEFAULT_SYNC_IMAGE = "ghcr.io/torchrun-ai/torchrun-controller:0.1.0"
# how long a worker's init container waits for the marker of the generation it needs
COPY_TIMEOUT_SECONDS = 600


def workspace_claim_name(job_name: str) -> str:
    return f"{job_name}-workspace"


def checkpoints_claim_name(job_name: str) -> str:
    return f"{job_name}-checkpoints"


def has_workspace(job: TorchrunJob) -> bool:
    """True when the job's code comes through the workspace PVC (every source but `none`)."""
    return job.spec.workspace.source is not WorkspaceSource.NONE


def workspace_size(queue: TorchrunQueue, topo: JobTopology) -> Quantity:
    return topo.storage_size(queue.spec.storage.workspace.size_per_gpu)


def _claim(metadata: dict[str, Any], size: str, modes: tuple[Any, ...], klass: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": [m.value for m in modes],
        "resources": {"requests": {"storage": size}},
    }
    if klass:
        spec["storageClassName"] = klass
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def build_workspace_pvc(job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology) -> dict[str, Any]:
    ws = queue.spec.storage.workspace
    meta = object_metadata(job, workspace_claim_name(job.name), SYNC_ROLE)
    return _claim(meta, str(workspace_size(queue, topo)), ws.access_modes, ws.storage_class_name)


def build_checkpoints_pvc(job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology) -> dict[str, Any]:
    cp = queue.spec.storage.checkpoints
    meta = object_metadata(job, checkpoints_claim_name(job.name), WORKER_ROLE)
    if cp.persist:
        del meta["ownerReferences"]
        meta["labels"][PERSIST_LABEL] = "true"
    return _claim(meta, str(topo.storage_size(cp.size_per_gpu)), cp.access_modes, cp.storage_class_name)


def is_reattachable(pvc: dict[str, Any] | Any, job: TorchrunJob) -> bool:
    """A persisted checkpoints claim an earlier job of this name left: ours to mount, never to
    change or delete (it has no owner; the labels say which job name it belongs to)."""
    meta = pvc["metadata"]
    lbl = meta.get("labels") or {}
    return (
        meta.get("name") == checkpoints_claim_name(job.name)
        and lbl.get(PERSIST_LABEL) == "true"
        and lbl.get(JOB_LABEL) == job.name
        and not meta.get("ownerReferences")
    )


@dataclass(frozen=True)
class WorkerStorage:
    """Additions to the worker pod template (see `worker_storage`)."""

    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)  # of the torchrun container
    init_containers: list[dict[str, Any]] = field(default_factory=list)


def worker_storage(job: TorchrunJob, queue: TorchrunQueue, *, generation: int, image: str) -> WorkerStorage:
    """Volumes, mounts and the code-copying init container of a worker pod.

    The init container runs as the torchrun container does (so the copied files belong to the
    same user) from the sync image, which has the sync program."""
    out = WorkerStorage()
    storage = queue.spec.storage
    if has_workspace(job):
        mount_path = job.spec.workspace.mount_path
        out.volumes.extend(
            [
                {
                    "name": WORKSPACE_VOLUME,
                    "persistentVolumeClaim": {"claimName": workspace_claim_name(job.name), "readOnly": True},
                },
                {"name": CODE_VOLUME, "emptyDir": {}},
            ]
        )
        out.mounts.append({"name": CODE_VOLUME, "mountPath": mount_path})
        copy = copy_argv(min_generation=generation, target=mount_path, timeout=COPY_TIMEOUT_SECONDS)
        out.init_containers.append(
            {
                "name": INIT_CONTAINER,
                "image": image,
                "command": copy,
                "env": [{"name": "TORCHRUN_WORKSPACE", "value": WORKSPACE_MOUNT}],
                "volumeMounts": [
                    {"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_MOUNT, "readOnly": True},
                    {"name": CODE_VOLUME, "mountPath": mount_path},
                ],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"cpu": "2", "memory": "512Mi"},
                },
                "securityContext": training_security_context(queue),
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        )
    if storage.checkpoints.enabled:
        claim: dict[str, Any] = {"claimName": checkpoints_claim_name(job.name)}
        out.volumes.append({"name": CHECKPOINTS_VOLUME, "persistentVolumeClaim": claim})
        out.mounts.append({"name": CHECKPOINTS_VOLUME, "mountPath": storage.checkpoints.mount_path})
    if storage.datasets is not None:
        ds = storage.datasets
        claim = {"claimName": ds.claim_name, "readOnly": ds.read_only}
        out.volumes.append({"name": DATASETS_VOLUME, "persistentVolumeClaim": claim})
        out.mounts.append({"name": DATASETS_VOLUME, "mountPath": ds.mount_path, "readOnly": ds.read_only})
    return out
