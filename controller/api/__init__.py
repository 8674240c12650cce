"""The torchrun.ai/v1alpha1 API: TorchrunQueue and TorchrunJob as frozen dataclasses.

Why dataclasses and not TypedDicts: a TypedDict is only a type-checker view of the raw dict, so
defaults, `zip` → `upload`, quantities and timestamps would be re-derived at every use, and
nothing would stop a reconciler from mutating an object that belongs to the informer cache.
Frozen dataclasses give parsed, defaulted values with attribute access that cannot be assigned
to (lists are tuples; maps and opaque objects are private copies typed as read-only `Mapping`),
and their
field metadata is what generates the CRD schema (`crds`), so types and schema cannot drift.
The price is a parse per reconcile (`from_json`: about 70 µs for a job and 300 µs for a fully
written queue on a slow CI core); a controller that needs less can cache the parsed object by
`(uid, resourceVersion)`.

Everything here is pure: no I/O and no `kubernetes` imports, so any layer may use it. The modules:
- the kinds: `torchrunqueue` and `torchrunjob`, with the parts they share (`core`), where a job's
  code comes from (`workspace`), its volumes (`storage`), how its processes find each other
  (`distributed`), its progress and checkpoints (`progress`, `checkpoint`), its goodput ledger
  (`goodput`), and how big it is on its queue (`topology`); `quantity` (resource quantities),
  `conditions` (metav1.Condition);
- the vocabulary: `groupversion` (group, version, kinds), `labels` (labels and annotations we
  write), `reasons` (every condition and Event reason), `resources` (the kinds' REST descriptors),
  `kueue` (Kueue's Workload versions and labels);
- the machinery: `fields` (a field's JSON name, doc and checks), `fielderrors`, `codec` (raw JSON
  ↔ dataclasses), `validation` (the checks that need the queue), `schema` and `crds` (the CRDs
  generated from the dataclasses).
"""

from controller.api.checkpoint import CheckpointStatus, NewestCheckpoint
from controller.api.codec import format_time, from_json, parse_time, to_json
from controller.api.conditions import (
    Condition,
    ConditionStatus,
    find_condition,
    is_true,
    remove_condition,
    set_condition,
    stored_conditions,
)
from controller.api.core import EnvVar, LocalObjectReference, ObjectMeta, Overridable, Toleration
from controller.api.distributed import Backend, Distributed, Elastic, RdzvBackend
from controller.api.fielderrors import FieldError, InvalidObjectError
from controller.api.goodput import Goodput, GoodputSeconds
from controller.api.groupversion import (
    API_VERSION,
    CATEGORY,
    GROUP,
    JOB_KIND,
    JOB_PLURAL,
    JOB_SHORT_NAME,
    JOB_SINGULAR,
    QUEUE_KIND,
    QUEUE_PLURAL,
    QUEUE_SHORT_NAME,
    QUEUE_SINGULAR,
    VERSION,
)
from controller.api.labels import (
    ETCD_ROLE,
    GENERATION_ANNOTATION,
    JOB_LABEL,
    PERSIST_LABEL,
    QUEUE_LABEL,
    RESTART_ANNOTATION,
    ROLE_LABEL,
    SYNC_ROLE,
    WORKER_ROLE,
)
from controller.api.quantity import Quantity
from controller.api.storage import (
    AccessMode,
    CheckpointMirror,
    CheckpointStorage,
    DatasetStorage,
    Storage,
    WorkspaceStorage,
)
from controller.api.topology import JobTopology, resolve_topology
from controller.api.torchrunjob import (
    FailurePolicy,
    JobConditionType,
    JobOverrides,
    JobPhase,
    RestartMode,
    TorchrunJob,
    TorchrunJobSpec,
    TorchrunJobStatus,
    WorkerCounts,
)
from controller.api.torchrunqueue import (
    NodeResources,
    QueueConditionType,
    QueueJobCounts,
    QueueQuota,
    ResourceQuota,
    Scheduler,
    Scheduling,
    TorchrunQueue,
    TorchrunQueueSpec,
    TorchrunQueueStatus,
)
from controller.api.validation import validate_job, validate_job_spec, validate_queue
from controller.api.workspace import GitSource, PVCSource, S3Source, Workspace, WorkspaceSource

__all__ = [
    "API_VERSION",
    "CATEGORY",
    "ETCD_ROLE",
    "GENERATION_ANNOTATION",
    "GROUP",
    "JOB_KIND",
    "JOB_LABEL",
    "JOB_PLURAL",
    "JOB_SHORT_NAME",
    "JOB_SINGULAR",
    "PERSIST_LABEL",
    "QUEUE_KIND",
    "QUEUE_LABEL",
    "QUEUE_PLURAL",
    "QUEUE_SHORT_NAME",
    "QUEUE_SINGULAR",
    "RESTART_ANNOTATION",
    "ROLE_LABEL",
    "SYNC_ROLE",
    "VERSION",
    "WORKER_ROLE",
    "AccessMode",
    "Backend",
    "CheckpointMirror",
    "CheckpointStatus",
    "CheckpointStorage",
    "Condition",
    "ConditionStatus",
    "DatasetStorage",
    "Distributed",
    "Elastic",
    "EnvVar",
    "FailurePolicy",
    "FieldError",
    "GitSource",
    "Goodput",
    "GoodputSeconds",
    "InvalidObjectError",
    "JobConditionType",
    "JobOverrides",
    "JobPhase",
    "JobTopology",
    "LocalObjectReference",
    "NewestCheckpoint",
    "NodeResources",
    "ObjectMeta",
    "Overridable",
    "PVCSource",
    "Quantity",
    "QueueConditionType",
    "QueueJobCounts",
    "QueueQuota",
    "RdzvBackend",
    "ResourceQuota",
    "RestartMode",
    "S3Source",
    "Scheduler",
    "Scheduling",
    "Storage",
    "Toleration",
    "TorchrunJob",
    "TorchrunJobSpec",
    "TorchrunJobStatus",
    "TorchrunQueue",
    "TorchrunQueueSpec",
    "TorchrunQueueStatus",
    "WorkerCounts",
    "Workspace",
    "WorkspaceSource",
    "WorkspaceStorage",
    "find_condition",
    "format_time",
    "from_json",
    "is_true",
    "parse_time",
    "remove_condition",
    "resolve_topology",
    "set_condition",
    "stored_conditions",
    "to_json",
    "validate_job",
    "validate_job_spec",
    "validate_queue",
]
