"""TorchrunQueue (cluster-scoped): how jobs on a queue run, written by a platform engineer.

A queue is a template: the shape of one node (GPUs, CPUs, memory), the container (image, env,
security context), storage per GPU, scheduling, and the scheduler's own queue. Jobs reference it
by name and add only what is specific to a run. Defaults are chosen so a minimal queue (node
resources and an image) is usable:
  * `securityContext.runAsNonRoot: true` — pods run as non-root unless the queue opts out (and
    under Pod Security `restricted`'s other asks, which the queue's own fields override);
  * storage as described in `storage` (workspace on, checkpoints off, 2Gi of /dev/shm per GPU);
  * scheduler `default`; nothing overridable by jobs (`allowOverrides: []`), so a platform
    engineer opts in to each override; the KAI queue and the Kueue LocalQueue are named after
    the TorchrunQueue unless `kaiQueue` / `kueueLocalQueue` say otherwise.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.api.codec import from_json
from controller.api.conditions import CONDITION_LIST_SCHEMA, Condition
from controller.api.core import (
    ENV_LIST_SCHEMA,
    IMAGE_SCHEMA,
    LABEL_KEY_SCHEMA,
    LABEL_NAME_SCHEMA,
    NAME_SCHEMA,
    PATH_SCHEMA,
    TOLERATION_LIST_SCHEMA,
    EnvVar,
    LocalObjectReference,
    ObjectMeta,
    Overridable,
    Toleration,
)
from controller.api.distributed import DEFAULT_ETCD_IMAGE
from controller.api.fields import JSONObject, Rule, api, cel
from controller.api.progress import Debug, ProgressPolicy
from controller.api.quantity import Quantity
from controller.api.storage import Storage

EXTENDED_RESOURCE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)[-A-Za-z0-9_.]{1,63}$"
)


class Scheduler(str, enum.Enum):
    """Who schedules a queue's pods (SPEC §5)."""

    DEFAULT = "default"
    KAI = "kai-scheduler"
    KUEUE = "kueue"
    COSCHEDULING = "coscheduling"
    VOLCANO = "volcano"


class QueueConditionType:
    READY = "Ready"
    KAI_QUEUE_READY = "KaiQueueReady"


# What the controller's own containers beside the training container request in every worker pod
# (the progress reporter sidecar asks for exactly this: torchrunjob/manifests/progress.py). The
# queue's nodeResources is what the whole pod asks for, so this comes out of the training
# container's share (torchrunjob/manifests/podresources.py), and a queue that leaves it nothing
# is refused (controller.api.validation).
RESERVED_PER_WORKER_POD: Mapping[str, str] = {"cpu": "10m", "memory": "48Mi"}


@dataclass(frozen=True)
class NodeResources:
    """The shape of one node of a job: each node is one pod that asks for exactly this in all, so a
    queue sized to a node's allocatable fills the node. The controller's containers in the pod
    (`RESERVED_PER_WORKER_POD`) come out of the training container's CPUs and memory; GPUs are
    all the training container's."""

    gpus: int = field(
        metadata=api(
            "GPUs per node; torchrun starts this many processes per node. 0 makes a CPU-only queue.",
            schema={"minimum": 0, "maximum": 64, "format": "int32"},
        )
    )
    cpus: Quantity | None = field(
        default=None,
        metadata=api(
            "CPUs per node: what each worker pod asks for in all, e.g. 96 (a node's allocatable) or "
            "500m; the training container requests and is limited to this less 10m for the "
            "controller's sidecar."
        ),
    )
    memory: Quantity | None = field(
        default=None,
        metadata=api(
            "Memory per node: what each worker pod asks for in all, e.g. 512Gi; the training "
            "container requests and is limited to this less 48Mi for the controller's sidecar."
        ),
    )
    gpu_type: str | None = field(
        default=None,
        metadata=api(
            "GPU model of the nodes, e.g. h100-80gb; informational "
            "(select nodes with scheduling.nodeSelector).",
            schema={"maxLength": 63},
        ),
    )
    gpu_resource_name: str = field(
        default="nvidia.com/gpu",
        metadata=api(
            "Extended resource name the GPUs are requested under.",
            schema={"maxLength": 253, "pattern": EXTENDED_RESOURCE_PATTERN},
        ),
    )


@cel(
    Rule(
        "has(self.required) != has(self.preferred)",
        "exactly one of required and preferred must be set",
        reason="FieldValueInvalid",
    )
)
@dataclass(frozen=True)
class KueueTopology:
    """Kueue's topology-aware scheduling of a job's workers: all within one domain of a level of
    the Kueue Topology that the ClusterQueue's flavor names (a level is a node label)."""

    required: str | None = field(
        default=None,
        metadata=api(
            "Node label of the level whose one domain must hold every worker of a job (Kueue's "
            "podset-required-topology), e.g. cloud.provider.com/topology-block; a job that fits "
            "in no single domain waits.",
            schema=LABEL_KEY_SCHEMA,
        ),
    )
    preferred: str | None = field(
        default=None,
        metadata=api(
            "Node label of the level whose one domain should hold every worker of a job (Kueue's "
            "podset-preferred-topology); Kueue spreads them over more domains when none fits.",
            schema=LABEL_KEY_SCHEMA,
        ),
    )


@dataclass(frozen=True)
class Scheduling:
    """Where and by whom the queue's pods are scheduled."""

    scheduler: Scheduler = field(
        default=Scheduler.DEFAULT,
        metadata=api(
            "The scheduler: default (kube-scheduler, no gang), kai-scheduler, kueue, coscheduling or volcano."
        ),
    )
    node_selector: Mapping[str, str] = field(
        default_factory=dict, metadata=api("Node labels every pod requires.", schema={"maxProperties": 64})
    )
    affinity: JSONObject | None = field(default=None, metadata=api("Pod affinity (core/v1 Affinity)."))
    tolerations: tuple[Toleration, ...] = field(
        default=(), metadata=api("Tolerations of every pod.", schema=TOLERATION_LIST_SCHEMA)
    )
    priority_class_name: str | None = field(
        default=None,
        metadata=api("PriorityClass of the pods (and of the gang for kai-scheduler).", schema=NAME_SCHEMA),
    )


@cel(
    Rule(
        "!has(self.quota) || !has(self.limit) || "
        "quantity(string(self.limit)).compareTo(quantity(string(self.quota))) >= 0",
        "limit must be greater than or equal to quota",
        field_path=".limit",
    )
)
@dataclass(frozen=True)
class ResourceQuota:
    """Quota of one resource in the scheduler queue (KAI Queue spec.resources.<resource>)."""

    quota: Quantity | None = field(default=None, metadata=api("Guaranteed amount; 0 when absent."))
    limit: Quantity | None = field(
        default=None, metadata=api("Most the queue may use; unlimited when absent.")
    )
    over_quota_weight: int = field(
        default=1,
        metadata=api(
            "Share of unused resources beyond the quota, relative to sibling queues.",
            schema={"minimum": 0, "maximum": 1000, "format": "int32"},
        ),
    )


@dataclass(frozen=True)
class QueueQuota:
    """Quota of the scheduler queue the controller manages (kai-scheduler only)."""

    gpu: ResourceQuota | None = field(default=None, metadata=api("GPUs (fractions allowed, e.g. 0.5)."))
    cpu: ResourceQuota | None = field(default=None, metadata=api("CPUs, e.g. 96 or 500m."))
    memory: ResourceQuota | None = field(default=None, metadata=api("Memory, e.g. 512Gi."))


def _only_with(field_name: str, scheduler: Scheduler) -> Rule:
    return Rule(
        f"!has(self.{field_name}) || self.scheduling.scheduler == '{scheduler.value}'",
        f"{field_name} is only allowed with scheduling.scheduler {scheduler.value}",
        field_path=f".{field_name}",
        reason="FieldValueForbidden",
    )


@cel(
    _only_with("kaiQueue", Scheduler.KAI),
    _only_with("parentKaiQueue", Scheduler.KAI),
    _only_with("quota", Scheduler.KAI),
    _only_with("kueueLocalQueue", Scheduler.KUEUE),
    _only_with("kueueTopology", Scheduler.KUEUE),
    Rule(
        "!has(self.kueueWorkloadSlices) || !self.kueueWorkloadSlices || "
        f"self.scheduling.scheduler == '{Scheduler.KUEUE.value}'",
        f"kueueWorkloadSlices is only allowed with scheduling.scheduler {Scheduler.KUEUE.value}",
        field_path=".kueueWorkloadSlices",
        reason="FieldValueForbidden",
    ),
    Rule(
        "!has(self.kueueTopology) || !has(self.kueueWorkloadSlices) || !self.kueueWorkloadSlices",
        "kueueWorkloadSlices cannot be combined with kueueTopology: Kueue runs elastic jobs without "
        "a required or preferred topology",
        field_path=".kueueWorkloadSlices",
        reason="FieldValueForbidden",
    ),
)
@dataclass(frozen=True)
class TorchrunQueueSpec:
    """How jobs on this queue run: node shape, container, storage, scheduling and scheduler queue."""

    node_resources: NodeResources = field(metadata=api("What each node of a job gets."))
    image: str = field(
        metadata=api("Container image with Python and PyTorch (torchrun on PATH).", schema=IMAGE_SCHEMA)
    )
    working_dir: str | None = field(
        default=None,
        metadata=api(
            "Working directory of torchrun; the job's workspace.mountPath (where the code is) when absent.",
            schema=PATH_SCHEMA,
        ),
    )
    env: tuple[EnvVar, ...] = field(
        default=(), metadata=api("Environment of every node.", schema=ENV_LIST_SCHEMA)
    )
    security_context: JSONObject = field(
        default_factory=dict,
        metadata=api(
            "Security context of the torchrun container and of the init containers that run as it "
            "does (core/v1 SecurityContext); runAsNonRoot defaults to true. Its fields win over "
            "what Pod Security's restricted level asks, which the controller sets beneath them: "
            "allowPrivilegeEscalation false, capabilities drop ALL (merged by key with the queue's), "
            "and the RuntimeDefault seccomp profile on the pod.",
            object_defaults={"runAsNonRoot": True},
        ),
    )
    image_pull_secrets: tuple[LocalObjectReference, ...] = field(
        default=(),
        metadata=api(
            "Secrets for pulling the image; they must exist in the job's namespace.",
            schema={"maxItems": 16, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
    )
    service_account_name: str | None = field(
        default=None, metadata=api("ServiceAccount of the pods, in the job's namespace.", schema=NAME_SCHEMA)
    )
    pod_labels: Mapping[str, str] = field(
        default_factory=dict,
        metadata=api(
            "Extra labels on every worker pod (cost allocation, network policy, monitoring); the "
            "controller's own labels win on conflict.",
            schema={"maxProperties": 64},
        ),
    )
    pod_annotations: Mapping[str, str] = field(
        default_factory=dict,
        metadata=api(
            "Extra annotations on every worker pod (sidecar injection, scraping, scheduler hints).",
            schema={"maxProperties": 64},
        ),
    )
    sync_image: str | None = field(
        default=None,
        metadata=api("Image of the sync pod; the controller's own image when absent.", schema=IMAGE_SCHEMA),
    )
    etcd_image: str | None = field(
        default=None,
        metadata=api(
            "Image of the etcd the controller runs for a job's etcd-v2 rendezvous without "
            "rdzvEndpoint: etcd 3.5 (3.6 removed the v2 API torchrun uses), with etcd at "
            f"/usr/local/bin/etcd like the official images; {DEFAULT_ETCD_IMAGE} when absent.",
            schema=IMAGE_SCHEMA,
        ),
    )
    storage: Storage = field(default_factory=Storage, metadata=api("Volumes of the queue's jobs."))
    scheduling: Scheduling = field(default_factory=Scheduling, metadata=api("Scheduler and placement."))
    kai_queue: str | None = field(
        default=None,
        metadata=api(
            "Name of the KAI Queue the controller creates for this queue; the queue's name when absent.",
            schema=LABEL_NAME_SCHEMA,
        ),
    )
    parent_kai_queue: str | None = field(
        default=None,
        metadata=api("Parent of the KAI Queue in KAI's queue hierarchy.", schema=LABEL_NAME_SCHEMA),
    )
    quota: QueueQuota | None = field(default=None, metadata=api("Quota of the KAI Queue."))
    kueue_local_queue: str | None = field(
        default=None,
        metadata=api(
            "Kueue LocalQueue (in the job's namespace) the jobs are submitted to; "
            "the queue's name when absent.",
            schema=LABEL_NAME_SCHEMA,
        ),
    )
    kueue_topology: KueueTopology | None = field(
        default=None,
        metadata=api(
            "Topology-aware scheduling by Kueue: the level of the Kueue Topology whose one domain "
            "holds a job's workers, required or preferred (the worker pods get Kueue's "
            "podset-*-topology annotation)."
        ),
    )
    kueue_workload_slices: bool = field(
        default=False,
        metadata=api(
            "The cluster's Kueue runs elastic jobs as workload slices (its ElasticJobsViaWorkloadSlices "
            "feature gate is on): the elastic jobs of this queue are marked kueue.x-k8s.io/elastic-job "
            "and their pods carry Kueue's elastic-job scheduling gate, and the autoscaler grows them one "
            "node at a time, each growth a new workload slice Kueue admits within the ClusterQueue's "
            "quota (the new pod waits, gated, until it does). Off: elastic jobs keep their size on "
            "Kueue queues. Do not set it where the gate is off: nothing would ungate the pods."
        ),
    )
    allow_overrides: tuple[Overridable, ...] = field(
        default=(),
        metadata=api(
            "Which fields of a job's spec.overrides this queue accepts; none when absent.",
            schema={"maxItems": len(Overridable), "x-kubernetes-list-type": "set"},
        ),
    )
    progress: ProgressPolicy | None = field(
        default=None,
        metadata=api("Defaults of the jobs' spec.progress (each field a job sets wins)."),
    )
    debug: Debug | None = field(
        default=None, metadata=api("Debugging tools of the jobs; stack dumps allowed when absent.")
    )
    termination_grace_period_seconds: int = field(
        default=120,
        metadata=api(
            "Seconds the worker pods have between SIGTERM and SIGKILL when the controller stops them "
            "on purpose (suspend, shrink, hot reload, deadline, deletion): time to save a checkpoint.",
            schema={"minimum": 0, "maximum": 86400, "format": "int64"},
        ),
    )


@dataclass(frozen=True)
class QueueJobCounts:
    """How many TorchrunJobs use the queue, by phase."""

    pending: int = field(default=0, metadata=api("Jobs waiting to start."))
    syncing: int = field(default=0, metadata=api("Jobs preparing their workspace."))
    running: int = field(default=0, metadata=api("Jobs running."))
    suspended: int = field(default=0, metadata=api("Jobs suspended."))
    succeeded: int = field(default=0, metadata=api("Jobs that succeeded."))
    failed: int = field(default=0, metadata=api("Jobs that failed."))
    total: int = field(default=0, metadata=api("All jobs that reference the queue, in any phase."))


@dataclass(frozen=True)
class TorchrunQueueStatus:
    """Observed state of the queue, written by the controller."""

    observed_generation: int = field(
        default=0, metadata=api("The metadata.generation this status describes.", schema={"format": "int64"})
    )
    conditions: tuple[Condition, ...] = field(
        default=(),
        metadata=api(
            "Ready (jobs can run; the reason says why not) and KaiQueueReady for kai-scheduler.",
            schema=CONDITION_LIST_SCHEMA,
        ),
    )
    jobs: QueueJobCounts = field(default_factory=QueueJobCounts, metadata=api("Jobs by phase."))


@dataclass(frozen=True)
class TorchrunQueue:
    """A parsed TorchrunQueue object."""

    spec: TorchrunQueueSpec = field(metadata=api("Desired state."))
    metadata: ObjectMeta = field(default_factory=ObjectMeta, metadata=api("Object metadata."))
    status: TorchrunQueueStatus = field(default_factory=TorchrunQueueStatus, metadata=api("Observed state."))

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TorchrunQueue:
        """Parse an object as the API returns it; raises `InvalidObjectError` naming the bad fields."""
        return from_json(cls, raw)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def kai_queue_name(self) -> str:
        """The KAI Queue this queue's pods go to."""
        return self.spec.kai_queue or self.metadata.name

    @property
    def etcd_image(self) -> str:
        """The image of the managed etcd of this queue's etcd-v2 jobs."""
        return self.spec.etcd_image or DEFAULT_ETCD_IMAGE

    @property
    def kueue_queue_name(self) -> str:
        """The value of the `kueue.x-k8s.io/queue-name` label on the queue's Jobs."""
        return self.spec.kueue_local_queue or self.metadata.name


QUEUE_ROOT_RULES = (
    Rule(
        "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
        "metadata.name must be a DNS label of at most 63 characters: it is used as a label value "
        "and as the default KAI and Kueue queue name",
    ),
)
