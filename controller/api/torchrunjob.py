"""TorchrunJob (namespaced): one training run, submitted by a researcher.

A job names its queue and says only what is specific to the run: its size (`numNodes`, or the
legacy `numGPUs` which `topology` turns into nodes), the command as typed locally, rendezvous
settings and elastic bounds (`distributed`), where the code comes from (`workspace`), lifecycle
limits and the overrides its queue allows. Decisions worth knowing:
  * `distributed.maxRestarts` is torchrun's in-node restart count; `failurePolicy.maxRestarts`
    counts whole-job restarts. Both default to 0: a failure is reported, not hidden.
  * `failurePolicy`: permanent exit codes fail the job at once (no whole-job restart); retriable
    exit codes recreate the node's pod without counting toward `backoffLimitPerNode`, up to
    `maxRetriableFailures` per attempt (then the attempt fails: never an endless loop); node
    disruptions never count.
  * `overrides` merge over the queue: scalars replace, `env` and `nodeSelector` merge by name/key
    (job wins), `tolerations` are appended. Each set field must be in the queue's
    `allowOverrides` (checked by the controller, see `validation`).
  * `jobQueue` is immutable: moving a running job to a queue with another node shape is a new job.
  * `numNodes`/`numGPUs` are immutable: every node's launch carries the size, so a new size is a
    new job (never a Job whose parallelism and torchrun's `--nnodes` disagree). An elastic job's
    size moves inside `--nnodes=MIN:MAX` without touching the spec: the autoscaler records the
    size it chose in `status.desiredNodes` (the controller's decision, like an HPA's
    `status.desiredReplicas`; the spec stays the user's) and the reconciler moves the worker
    Job's parallelism to it.
  * `spec.workspace` (the property) is the one reading of the code's source: the `workspace`
    field, or the seed's deprecated `volumes.workspace` converted. The field has no server-side
    default, so CEL can refuse both spellings at once; its absence means upload at /app.
  * `distributed.rdzvBackend: etcd-v2` without `rdzvEndpoint` (the seed's examples) runs an etcd
    for the job.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.api.checkpoint import CheckpointStatus
from controller.api.codec import from_json
from controller.api.conditions import CONDITION_LIST_SCHEMA, Condition
from controller.api.core import (
    DNS_LABEL_PATTERN,
    ENV_LIST_SCHEMA,
    NAME_SCHEMA,
    PATH_SCHEMA,
    TOLERATION_LIST_SCHEMA,
    EnvVar,
    ObjectMeta,
    Overridable,
    Toleration,
)
from controller.api.distributed import MAX_NODES, Distributed, Elastic
from controller.api.fields import Rule, api, cel
from controller.api.goodput import Goodput
from controller.api.progress import Progress, ProgressPolicy
from controller.api.workspace import SeedVolumes, Workspace

MAX_GPUS = 8192
MAX_JOB_NAME_LENGTH = 52
_EXIT_CODES = {"maxItems": 64, "x-kubernetes-list-type": "set"}


class JobPhase(str, enum.Enum):
    PENDING = "Pending"
    SYNCING = "Syncing"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class JobConditionType:
    """Condition types of a TorchrunJob; conditions are the truth, `phase` a summary."""

    ADMITTED = "Admitted"  # queue found and Ready, spec valid against it; reason says why not
    WORKSPACE_READY = "WorkspaceReady"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PROGRESSING = "Progressing"  # set once the job reported; False: Stalled, Unknown: ReportingLost


class RestartMode(str, enum.Enum):
    RECREATE = "Recreate"  # every restart makes a new worker Job (new pods)
    IN_PLACE = "InPlace"  # failures, stall restarts and reloads restart torchrun inside the pods


@cel(
    Rule(
        "!has(self.permanentExitCodes) || !has(self.retriableExitCodes) || "
        "!self.permanentExitCodes.exists(c, c in self.retriableExitCodes)",
        "an exit code cannot be both in permanentExitCodes and in retriableExitCodes",
        field_path=".retriableExitCodes",
    )
)
@dataclass(frozen=True)
class FailurePolicy:
    """What a failure costs: restarts of a node's pod, of the whole job, or nothing."""

    max_restarts: int = field(
        default=0,
        metadata=api(
            "Whole-job restarts after a failure (also capped by the controller's --restart-limit).",
            schema={"minimum": 0, "maximum": 1000, "format": "int32"},
        ),
    )
    backoff_limit_per_node: int = field(
        default=0,
        metadata=api(
            "Pod failures of one node retried in place before the job fails (Job backoffLimitPerIndex).",
            schema={"minimum": 0, "maximum": 100, "format": "int32"},
        ),
    )
    permanent_exit_codes: tuple[int, ...] = field(
        default=(),
        metadata=api(
            "Exit codes that fail the job at once, without any restart.",
            schema=_EXIT_CODES,
            items={"minimum": 1, "maximum": 255},
        ),
    )
    retriable_exit_codes: tuple[int, ...] = field(
        default=(),
        metadata=api(
            "Exit codes whose pod is recreated without counting toward backoffLimitPerNode, at most "
            "maxRetriableFailures times per attempt.",
            schema=_EXIT_CODES,
            items={"minimum": 1, "maximum": 255},
        ),
    )
    max_retriable_failures: int = field(
        default=10,
        metadata=api(
            "Pod failures with a retriableExitCodes code recreated in place per attempt; one more "
            "fails the attempt like any failure (a whole-job restart while maxRestarts allow, else "
            "the job fails), so a code that always recurs cannot restart pods forever.",
            schema={"minimum": 0, "maximum": 1000, "format": "int32"},
        ),
    )
    restart_mode: RestartMode = field(
        default=RestartMode.RECREATE,
        metadata=api(
            "How a restart runs: Recreate (a new worker Job, every pod new) or InPlace (the pods stay "
            "and the supervisor in each starts a fresh torchrun on the newest checkpoint: seconds, "
            "not a rebuilt world; needs the controller's progress endpoint). Restarts count the same.",
        ),
    )


@dataclass(frozen=True)
class JobOverrides:
    """Queue settings this job replaces; each needs the queue's allowOverrides to list it."""

    image: str | None = field(
        default=None, metadata=api("Container image.", schema={"minLength": 1, "maxLength": 1024})
    )
    working_dir: str | None = field(
        default=None, metadata=api("Working directory of torchrun.", schema=PATH_SCHEMA)
    )
    env: tuple[EnvVar, ...] = field(
        default=(), metadata=api("Variables merged over the queue's by name.", schema=ENV_LIST_SCHEMA)
    )
    priority_class_name: str | None = field(
        default=None, metadata=api("PriorityClass of the pods.", schema=NAME_SCHEMA)
    )
    node_selector: Mapping[str, str] = field(
        default_factory=dict,
        metadata=api("Labels merged over the queue's nodeSelector by key.", schema={"maxProperties": 64}),
    )
    tolerations: tuple[Toleration, ...] = field(
        default=(), metadata=api("Tolerations added to the queue's.", schema=TOLERATION_LIST_SCHEMA)
    )
    checkpoints_keep: int | None = field(
        default=None,
        metadata=api(
            "Retention of this job's checkpoints, in place of the queue's storage.checkpoints.keep.",
            schema={"minimum": 1, "maximum": 10000, "format": "int32"},
        ),
    )

    def fields_set(self) -> tuple[Overridable, ...]:
        """The overridable fields this job sets, in `Overridable` order."""
        values: dict[Overridable, Any] = {
            Overridable.IMAGE: self.image,
            Overridable.WORKING_DIR: self.working_dir,
            Overridable.ENV: self.env,
            Overridable.PRIORITY_CLASS_NAME: self.priority_class_name,
            Overridable.NODE_SELECTOR: self.node_selector,
            Overridable.TOLERATIONS: self.tolerations,
            Overridable.CHECKPOINTS_KEEP: self.checkpoints_keep,
        }
        return tuple(o for o in Overridable if values[o] not in (None, (), {}))


@cel(
    Rule(
        "has(self.numNodes) == has(oldSelf.numNodes) && "
        "(!has(self.numNodes) || self.numNodes == oldSelf.numNodes) && "
        "has(self.numGPUs) == has(oldSelf.numGPUs) && "
        "(!has(self.numGPUs) || self.numGPUs == oldSelf.numGPUs)",
        "numNodes and numGPUs are immutable: the size is baked into every node's torchrun launch "
        "(--nnodes, WORLD_SIZE); delete the job and submit it again with the new size",
        field_path=".numNodes",
        reason="FieldValueForbidden",
    ),
    Rule(
        "!has(self.workspace) || !has(self.volumes) || !has(self.volumes.workspace)",
        "volumes.workspace is the seed's deprecated spelling of workspace: set only workspace",
        field_path=".volumes.workspace",
        reason="FieldValueForbidden",
    ),
    Rule(
        "has(self.numNodes) || has(self.numGPUs)",
        "one of numNodes or numGPUs is required",
        field_path=".numNodes",
        reason="FieldValueRequired",
    ),
    Rule(
        "!has(self.numNodes) || !has(self.numGPUs)",
        "numNodes and numGPUs are mutually exclusive: set exactly one",
        field_path=".numGPUs",
        reason="FieldValueForbidden",
    ),
    Rule(
        "!has(self.elastic) || !has(self.numGPUs)",
        "elastic jobs are sized in nodes: use numNodes, not numGPUs",
        field_path=".numGPUs",
        reason="FieldValueForbidden",
    ),
    Rule(
        "!has(self.elastic) || !has(self.numNodes) || "
        "(self.numNodes >= self.elastic.minNodes && self.numNodes <= self.elastic.maxNodes)",
        "numNodes must be within elastic.minNodes..elastic.maxNodes",
        field_path=".numNodes",
    ),
)
@dataclass(frozen=True)
class TorchrunJobSpec:
    """One training run: its queue, size, command, code and lifecycle."""

    job_queue: str = field(
        metadata=api(
            "Name of the TorchrunQueue the job runs on; immutable.",
            schema={"minLength": 1, "maxLength": 63, "pattern": DNS_LABEL_PATTERN},
            rules=(
                Rule(
                    "self == oldSelf",
                    "jobQueue is immutable: delete the job and submit it to the other queue",
                    reason="FieldValueForbidden",
                ),
            ),
        )
    )
    command: str = field(
        metadata=api(
            "What you would type locally, e.g. `python train.py --epochs 100`, `python -m pkg.train` or "
            "`bash run.sh`; the controller turns it into the torchrun launch.",
            schema={"minLength": 1, "maxLength": 16384},
        )
    )
    num_nodes: int | None = field(
        default=None,
        metadata=api(
            "Nodes (pods) of the job, each with the queue's nodeResources; "
            "the initial size of an elastic job.",
            schema={"minimum": 1, "maximum": MAX_NODES, "format": "int32"},
        ),
    )
    num_gpus: int | None = field(
        default=None,
        metadata=api(
            "Legacy: total GPUs; one node when it fits in one, otherwise whole nodes of the queue's size.",
            json_name="numGPUs",
            schema={"minimum": 1, "maximum": MAX_GPUS, "format": "int32"},
        ),
    )
    distributed: Distributed = field(default_factory=Distributed, metadata=api("torch.distributed settings."))
    elastic: Elastic | None = field(
        default=None, metadata=api("Elastic node range; a fixed size when absent.")
    )
    declared_workspace: Workspace | None = field(
        default=None,
        metadata=api("Where the code comes from; source upload at /app when absent.", json_name="workspace"),
    )
    volumes: SeedVolumes | None = field(
        default=None,
        metadata=api(
            "Deprecated, the seed's form: volumes.workspace {enabled, source} is read as workspace; "
            "write workspace instead."
        ),
    )
    suspend: bool = field(default=False, metadata=api("Suspended: pods are removed, PVCs and status kept."))
    ttl_seconds_after_finished: int | None = field(
        default=None,
        metadata=api(
            "Delete the job this many seconds after it finished; kept forever when absent.",
            schema={"minimum": 0, "format": "int32"},
        ),
    )
    active_deadline_seconds: int | None = field(
        default=None,
        metadata=api(
            "Fail the job this many seconds after it started (sync included).",
            schema={"minimum": 1, "format": "int64"},
        ),
    )
    failure_policy: FailurePolicy = field(
        default_factory=FailurePolicy, metadata=api("Restarts after failures.")
    )
    overrides: JobOverrides | None = field(default=None, metadata=api("Queue settings this job replaces."))
    progress: ProgressPolicy | None = field(
        default=None,
        metadata=api("Stall detection of the job's progress reports; each field absent takes the queue's."),
    )

    @property
    def seed_workspace(self) -> bool:
        """The job spells its workspace the seed's deprecated way, `volumes.workspace`."""
        return self.volumes is not None and self.volumes.workspace is not None

    @property
    def workspace(self) -> Workspace:
        """Where the code comes from: `workspace`, else the deprecated `volumes.workspace`
        converted, else the default (upload at /app). Everything reads the workspace here."""
        if self.declared_workspace is not None:
            return self.declared_workspace
        if self.volumes is not None and self.volumes.workspace is not None:
            return self.volumes.workspace.as_workspace()
        return Workspace()


@dataclass(frozen=True)
class WorkerCounts:
    """Pods of the worker Job by state."""

    active: int = field(default=0, metadata=api("Pods running or pending."))
    ready: int = field(default=0, metadata=api("Pods ready."))
    succeeded: int = field(default=0, metadata=api("Pods succeeded."))
    failed: int = field(default=0, metadata=api("Pods failed."))


@dataclass(frozen=True)
class TorchrunJobStatus:
    """Observed state of the job, written by the controller."""

    phase: JobPhase = field(
        default=JobPhase.PENDING,
        metadata=api(
            "Pending, Syncing, Running, Succeeded, Failed or Suspended: a summary of the conditions."
        ),
    )
    conditions: tuple[Condition, ...] = field(
        default=(),
        metadata=api(
            "Admitted, WorkspaceReady, Running, Suspended, Succeeded, Failed, Progressing.",
            schema=CONDITION_LIST_SCHEMA,
        ),
    )
    observed_generation: int = field(
        default=0, metadata=api("The metadata.generation this status describes.", schema={"format": "int64"})
    )
    nodes: int = field(default=0, metadata=api("Nodes the job runs on now.", schema={"format": "int32"}))
    gpus: int = field(
        default=0,
        metadata=api("GPUs the job runs on now (nodes × GPUs per node).", schema={"format": "int32"}),
    )
    desired_nodes: int | None = field(
        default=None,
        metadata=api(
            "Elastic jobs: the size the controller's autoscaler chose within elastic.minNodes..maxNodes "
            "(numNodes until it chooses one); the worker Job's parallelism follows it.",
            schema={"minimum": 1, "format": "int32"},
        ),
    )
    workers: WorkerCounts = field(default_factory=WorkerCounts, metadata=api("Worker pods by state."))
    restarts: int = field(
        default=0,
        metadata=api("Whole-job restarts so far, in place ones included.", schema={"format": "int32"}),
    )
    in_place_restarts: int = field(
        default=0,
        metadata=api(
            "Of restarts, those that ran in place (failurePolicy.restartMode InPlace): the pods stayed.",
            schema={"format": "int32"},
        ),
    )
    disruptions: int = field(
        default=0,
        metadata=api(
            "Attempts ended at once because a worker pod was disrupted (evicted, preempted, or lost "
            "with its node) and started again from the newest checkpoint, not counted in restarts: "
            "a fixed-size job that restarts by recreating its pods, whose torchrun cannot take a "
            "replaced node back (distributed.maxRestarts 0).",
            schema={"format": "int32"},
        ),
    )
    in_place_generation: int = field(
        default=0,
        metadata=api(
            "The generation every worker pod's supervisor runs (InPlace only): raised by each restart "
            "in place and each hot reload in place, never lowered in an attempt; 0 in a new one.",
            schema={"format": "int32"},
        ),
    )
    in_place_workspace_generation: int = field(
        default=0,
        metadata=api(
            "The workspace generation the last hot reload in place asked the workers to run (0: none).",
            schema={"format": "int64"},
        ),
    )
    in_place_running_generation: int | None = field(
        default=None,
        metadata=api(
            "The inPlaceGeneration every worker pod's supervisor last said it runs (the lowest over "
            "the node ranks; absent until each has): equal to inPlaceGeneration once a restart or a "
            "reload in place reached every rank.",
            schema={"format": "int32"},
        ),
    )
    in_place_restart_time: datetime.datetime | None = field(
        default=None,
        metadata=api(
            "When the controller last named a new inPlaceGeneration. The stall and startup clocks "
            "start again once every rank runs it (inPlaceRunningTime), or, while one does not yet, "
            "10 s (the supervisors' kill grace) after this time."
        ),
    )
    in_place_running_time: datetime.datetime | None = field(
        default=None,
        metadata=api(
            "When inPlaceRunningGeneration last rose: from then on every worker pod's supervisor "
            "ran that generation's torchrun."
        ),
    )
    restarts_by_reason: Mapping[str, int] = field(
        default_factory=dict,
        metadata=api(
            "Whole-job restarts so far by the reason the attempt ended (Stalled, WorkersFailed, ...): "
            "counted with restarts, in the same status write, so they add up to it.",
            schema={"maxProperties": 32},
        ),
    )
    retriable_failures: int = field(
        default=0,
        metadata=api(
            "Pod failures with a retriable exit code in the current attempt (reset by a whole-job restart).",
            schema={"format": "int32"},
        ),
    )
    start_time: datetime.datetime | None = field(
        default=None, metadata=api("When the job started (sync included).")
    )
    completion_time: datetime.datetime | None = field(default=None, metadata=api("When the job finished."))
    workspace_generation: int = field(
        default=0,
        metadata=api(
            "Generation of the workspace the workers run (bumped by each upload or hot reload).",
            schema={"format": "int64"},
        ),
    )
    workspace_sha256: str | None = field(
        default=None,
        metadata=api(
            "SHA-256 of the uploaded archive of workspaceGeneration, from the sync program's marker "
            "(absent for git, s3 and pvc sources); the plugin compares it to skip unchanged uploads.",
            json_name="workspaceSha256",
            schema={"maxLength": 64},
        ),
    )
    workspace_sync_time: datetime.datetime | None = field(
        default=None,
        metadata=api(
            "When workspaceGeneration finished syncing: worker pods made before it are restarted onto it."
        ),
    )
    workspace_files: int | None = field(
        default=None,
        metadata=api(
            "Entries of workspaceGeneration, as the sync program counted them.", schema={"format": "int64"}
        ),
    )
    workspace_bytes: int | None = field(
        default=None,
        metadata=api(
            "Bytes of the files of workspaceGeneration, unpacked, as the sync program counted them.",
            schema={"format": "int64"},
        ),
    )
    progress: Progress | None = field(
        default=None,
        metadata=api("Where training is, as the ranks last reported it (TORCHRUN_PROGRESS_FILE)."),
    )
    checkpoint: CheckpointStatus | None = field(
        default=None,
        metadata=api("The checkpoints the current attempt's workers found when they started."),
    )
    goodput: Goodput | None = field(
        default=None,
        metadata=api(
            "The share of wall time since the job was admitted that advanced training for good, "
            "the rest by cause (controller/torchrunjob/goodput.py)."
        ),
    )

    @property
    def attempt(self) -> int:
        """The worker Job's attempt: the restarts and disruptions that recreated it (restarts in
        place keep it)."""
        return self.restarts - self.in_place_restarts + self.disruptions


@dataclass(frozen=True)
class TorchrunJob:
    """A parsed TorchrunJob object."""

    spec: TorchrunJobSpec = field(metadata=api("Desired state."))
    metadata: ObjectMeta = field(default_factory=ObjectMeta, metadata=api("Object metadata."))
    status: TorchrunJobStatus = field(default_factory=TorchrunJobStatus, metadata=api("Observed state."))

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TorchrunJob:
        """Parse an object as the API returns it; raises `InvalidObjectError` naming the bad fields."""
        return from_json(cls, raw)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def key(self) -> str:
        """The `namespace/name` key of the informer cache and the workqueue."""
        return f"{self.metadata.namespace}/{self.metadata.name}"


JOB_ROOT_RULES = (
    Rule(
        f"self.metadata.name.size() <= {MAX_JOB_NAME_LENGTH} && "
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        f"metadata.name must be a DNS-1035 label (lower case, starting with a letter) of at most "
        f"{MAX_JOB_NAME_LENGTH} characters: it names the job's Service and its pods' hostnames "
        "(<name>-<index>)",
    ),
)
