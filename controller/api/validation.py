"""What the controller checks that the CRD schema and CEL cannot: rules that need the queue,
quantity arithmetic, or shell parsing.

Every check returns `FieldError`s whose path names the offending field (`spec.numGPUs: ...`), the
same shape as the API server's rejections. An empty list means valid. Nothing here does I/O;
the controllers turn errors into a condition (reason `InvalidSpec` or similar) and do not retry
until the object changes.

Checked here:
  * queue: nodeResources is what a whole worker pod asks for, so its CPUs and memory must leave
    the training container something beside the controller's own containers
    (`RESERVED_PER_WORKER_POD`); /dev/shm (shmSizePerGPU × GPUs per node) must fit in the node's
    memory; enabled volumes need a non-zero size per GPU.
  * job alone: `command` must split like a shell command (balanced quotes) into something.
  * job against its queue: `numGPUs` resolves to whole nodes (see `topology`); each override is
    listed in the queue's `allowOverrides`; every source but `none` needs the queue's workspace
    volume; the job must fit in the scheduler queue's GPU limit, or it would wait forever.
"""

from __future__ import annotations

import shlex
from fractions import Fraction

from controller.api.fielderrors import FieldError, InvalidObjectError
from controller.api.quantity import Quantity
from controller.api.storage import CheckpointStorage, WorkspaceStorage
from controller.api.topology import JobTopology, resolve_topology
from controller.api.torchrunjob import TorchrunJob, TorchrunJobSpec
from controller.api.torchrunqueue import RESERVED_PER_WORKER_POD, Scheduler, TorchrunQueue, TorchrunQueueSpec
from controller.api.workspace import WorkspaceSource

__all__ = ["FieldError", "InvalidObjectError", "validate_job", "validate_job_spec", "validate_queue"]

_NEEDS_WORKSPACE_VOLUME = (
    WorkspaceSource.UPLOAD,
    WorkspaceSource.GIT,
    WorkspaceSource.S3,
    WorkspaceSource.PVC,
)


def validate_queue(queue: TorchrunQueue) -> list[FieldError]:
    """Problems with a queue on its own."""
    spec = queue.spec
    return [*_check_worker_room(spec), *_check_shm(spec), *_check_volume_sizes(spec)]


def validate_job_spec(spec: TorchrunJobSpec) -> list[FieldError]:
    """Problems with a job that do not depend on its queue."""
    try:
        argv = shlex.split(spec.command)
    except ValueError as exc:
        return [FieldError("spec.command", f"cannot be split like a shell command: {exc}")]
    if not argv:
        return [FieldError("spec.command", "is empty")]
    return []


def validate_job(job: TorchrunJob, queue: TorchrunQueue) -> list[FieldError]:
    """Every problem of `job` when run on `queue` (including `validate_job_spec`'s)."""
    errors = validate_job_spec(job.spec)
    try:
        topology = resolve_topology(job.spec, queue.spec.node_resources)
    except InvalidObjectError as exc:
        errors.extend(exc.errors)
    else:
        errors.extend(_check_gpu_limit(job.spec, topology, queue))
    errors.extend(_check_overrides(job.spec, queue))
    errors.extend(_check_workspace_volume(job.spec, queue))
    return errors


def _check_worker_room(spec: TorchrunQueueSpec) -> list[FieldError]:
    node = spec.node_resources
    errors = []
    for resource, name, amount in (("cpu", "cpus", node.cpus), ("memory", "memory", node.memory)):
        reserved = Quantity.parse(RESERVED_PER_WORKER_POD[resource])
        if amount is not None and amount <= reserved:
            errors.append(
                FieldError(
                    f"spec.nodeResources.{name}",
                    f"{amount} is what each worker pod asks for in all, and the controller's progress "
                    f"reporter sidecar in it requests {reserved}: nothing is left for the training "
                    f"container (give more than {reserved})",
                )
            )
    return errors


def _check_shm(spec: TorchrunQueueSpec) -> list[FieldError]:
    node = spec.node_resources
    if node.memory is None or node.gpus == 0:
        return []
    shm = spec.storage.shm_size_per_gpu * node.gpus
    if shm <= node.memory:
        return []
    return [
        FieldError(
            "spec.storage.shmSizePerGPU",
            f"{node.gpus} GPUs × {spec.storage.shm_size_per_gpu} = {shm} of /dev/shm does not fit in "
            f"nodeResources.memory {node.memory} (shared memory counts against the pod's memory)",
        )
    ]


def _check_volume_sizes(spec: TorchrunQueueSpec) -> list[FieldError]:
    storage = spec.storage
    volumes: dict[str, WorkspaceStorage | CheckpointStorage] = {
        "workspace": storage.workspace,
        "checkpoints": storage.checkpoints,
    }
    return [
        FieldError(f"spec.storage.{name}.sizePerGPU", "must be greater than zero when the volume is enabled")
        for name, volume in volumes.items()
        if volume.enabled and volume.size_per_gpu.is_zero()
    ]


def _check_overrides(spec: TorchrunJobSpec, queue: TorchrunQueue) -> list[FieldError]:
    if spec.overrides is None:
        return []
    allowed = set(queue.spec.allow_overrides)
    listed = ", ".join(o.value for o in queue.spec.allow_overrides) or "nothing"
    return [
        FieldError(
            f"spec.overrides.{field.value}",
            f'queue "{queue.name}" does not allow overriding {field.value} (its allowOverrides: {listed})',
        )
        for field in spec.overrides.fields_set()
        if field not in allowed
    ]


def _check_workspace_volume(spec: TorchrunJobSpec, queue: TorchrunQueue) -> list[FieldError]:
    source = spec.workspace.source
    if source not in _NEEDS_WORKSPACE_VOLUME or queue.spec.storage.workspace.enabled:
        return []
    path = "spec.volumes.workspace.source" if spec.seed_workspace else "spec.workspace.source"
    return [
        FieldError(
            path,
            f'source {source.value} needs a workspace volume, but queue "{queue.name}" has '
            "storage.workspace.enabled: false (use source none, with the code in the image)",
        )
    ]


def _check_gpu_limit(spec: TorchrunJobSpec, topology: JobTopology, queue: TorchrunQueue) -> list[FieldError]:
    quota = queue.spec.quota
    if queue.spec.scheduling.scheduler is not Scheduler.KAI or quota is None or quota.gpu is None:
        return []
    limit = quota.gpu.limit
    needed = topology.min_nodes * topology.gpus_per_node
    if limit is None or Quantity(Fraction(needed)) <= limit:
        return []
    path = "spec.elastic.minNodes" if spec.elastic else "spec.numGPUs" if spec.num_gpus else "spec.numNodes"
    return [
        FieldError(
            path,
            f'the job needs {needed} GPUs but queue "{queue.name}" may use at most {limit} '
            "(quota.gpu.limit); it would never be scheduled",
        )
    ]
