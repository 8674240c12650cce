"""Volumes of a queue's jobs: `spec.storage` of a TorchrunQueue.

Sizes are per GPU of the whole job (`topology.JobTopology.storage_size` does the arithmetic), so a
queue's storage scales with the jobs on it. Defaults, chosen so a queue that says nothing works:
  * workspace on, 10Gi per GPU, `ReadWriteMany` — the sync pod writes it and every node reads it,
    and nodes sit on different machines, so only RWX works for multi-node jobs (single-node
    clusters may set `ReadWriteOnce`);
  * checkpoints off; when on, 50Gi per GPU, RWX (every rank may write), at /checkpoints, deleted
    with the job unless `persist`;
  * datasets: an existing claim, mounted read-only at /datasets;
  * `/dev/shm` 2Gi per GPU: PyTorch DataLoader workers and NCCL need far more than the 64Mi a
    container gets by default, and it counts against the node's memory (see `validation`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from controller.api.core import NAME_SCHEMA, PATH_SCHEMA
from controller.api.fields import api
from controller.api.quantity import Quantity


class AccessMode(str, enum.Enum):
    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_ONLY_MANY = "ReadOnlyMany"
    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE_POD = "ReadWriteOncePod"


_ACCESS_MODES_SCHEMA = {"minItems": 1, "maxItems": 4, "x-kubernetes-list-type": "set"}


@dataclass(frozen=True)
class WorkspaceStorage:
    """The per-job workspace PVC the sync pod fills and every node copies the code from."""

    enabled: bool = field(
        default=True, metadata=api("Create the workspace PVC; every workspace source but none needs it.")
    )
    size_per_gpu: Quantity = field(
        default=Quantity.parse("10Gi"),
        metadata=api(
            "Size per GPU of the whole job (a CPU-only node counts as one GPU).", json_name="sizePerGPU"
        ),
    )
    storage_class_name: str | None = field(
        default=None,
        metadata=api("StorageClass of the PVC; the cluster default when absent.", schema=NAME_SCHEMA),
    )
    access_modes: tuple[AccessMode, ...] = field(
        default=(AccessMode.READ_WRITE_MANY,),
        metadata=api(
            "Access modes of the PVC; ReadWriteMany because every node reads it.", schema=_ACCESS_MODES_SCHEMA
        ),
    )


@dataclass(frozen=True)
class CheckpointMirror:
    """An S3 prefix mirroring the job's complete checkpoints (docs/checkpoints.md)."""

    uri: str = field(
        metadata=api(
            "s3://bucket/prefix/ under which each job's checkpoints are copied, as "
            "<prefix><namespace>/<job name>/<job-UID or persisted>/<checkpoint>/... "
            "(a missing trailing / is added).",
            schema={"maxLength": 2048, "pattern": r"^s3://[a-z0-9][-a-z0-9.]{1,61}[a-z0-9](/.*)?$"},
        )
    )
    secret: str | None = field(
        default=None,
        metadata=api(
            "Secret in the job's namespace with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally "
            "AWS_ENDPOINT_URL and AWS_REGION; the pod's own credentials when absent.",
            schema=NAME_SCHEMA,
        ),
    )


@dataclass(frozen=True)
class CheckpointStorage:
    """A per-job PVC for checkpoints, mounted read-write on every node."""

    enabled: bool = field(default=False, metadata=api("Create the checkpoints PVC."))
    size_per_gpu: Quantity = field(
        default=Quantity.parse("50Gi"),
        metadata=api(
            "Size per GPU of the whole job (a CPU-only node counts as one GPU).", json_name="sizePerGPU"
        ),
    )
    storage_class_name: str | None = field(
        default=None,
        metadata=api("StorageClass of the PVC; the cluster default when absent.", schema=NAME_SCHEMA),
    )
    access_modes: tuple[AccessMode, ...] = field(
        default=(AccessMode.READ_WRITE_MANY,),
        metadata=api(
            "Access modes of the PVC; ReadWriteMany because every node writes to it.",
            schema=_ACCESS_MODES_SCHEMA,
        ),
    )
    mount_path: str = field(
        default="/checkpoints",
        metadata=api("Where the checkpoints PVC is mounted.", schema=PATH_SCHEMA),
    )
    persist: bool = field(
        default=False, metadata=api("Keep the PVC when the job is deleted (it then has no owner reference).")
    )
    keep: int | None = field(
        default=None,
        metadata=api(
            "Retention: only the newest `keep` complete checkpoints stay (older incomplete ones go too); "
            "applied at every start of the workers. All are kept when absent.",
            schema={"minimum": 1, "maximum": 10000, "format": "int32"},
        ),
    )
    s3: CheckpointMirror | None = field(
        default=None,
        metadata=api(
            "Mirror to S3: at every start rank 0 uploads the complete checkpoints the prefix lacks "
            "(and applies keep there); a start whose volume has no complete checkpoint downloads the "
            "newest copy first."
        ),
    )


@dataclass(frozen=True)
class DatasetStorage:
    """An existing PVC with datasets, shared by all jobs of the queue."""

    claim_name: str = field(
        metadata=api(
            "Name of the PVC; it must exist in every namespace that submits to the queue.", schema=NAME_SCHEMA
        )
    )
    mount_path: str = field(
        default="/datasets",
        metadata=api("Where the datasets PVC is mounted.", schema=PATH_SCHEMA),
    )
    read_only: bool = field(default=True, metadata=api("Mount read-only, so no job can damage shared data."))


@dataclass(frozen=True)
class Storage:
    """Volumes of the queue's jobs; sizes scale with the job's GPUs."""

    workspace: WorkspaceStorage = field(default_factory=WorkspaceStorage, metadata=api("The workspace PVC."))
    checkpoints: CheckpointStorage = field(
        default_factory=CheckpointStorage, metadata=api("The checkpoints PVC.")
    )
    datasets: DatasetStorage | None = field(default=None, metadata=api("A shared datasets PVC."))
    shm_size_per_gpu: Quantity = field(
        default=Quantity.parse("2Gi"),
        metadata=api(
            "Size of the memory-backed /dev/shm per GPU of a node (counts against the node's memory).",
            json_name="shmSizePerGPU",
        ),
    )
