"""The controllers' vocabulary: every condition and Event reason, with its Event severity.

Reasons are API (CamelCase, one word: the Kubernetes API conventions), so each is spelled once,
here, and carries how its transitions become Events:
- `WARNING`: a Warning Event whenever a condition moves to this reason (trouble to act on);
- `NORMAL`: a Normal Event when a condition becomes True with it (progress worth a line);
- `QUIET`: no Event (too routine; the condition still says it).
Three sets, one per speaker: `Reason` (the TorchrunJob controller's conditions and Events),
`QueueReason` (the TorchrunQueue controller's `Ready` and `KaiQueueReady`: it records no Events,
so every one is `QUIET`) and `AutoscalerReason` (its `ScaledUp`/`ScaledDown` Events, and why a
resize was planned, which its Event message and log line say).
A job reason not listed here — the sync program's failure reasons reach `WorkspaceReady`
verbatim — counts as `WARNING`, so a new reason can never silently become a Normal Event.
"""

from __future__ import annotations

from enum import Enum


class Severity(Enum):
    QUIET = "Quiet"
    NORMAL = "Normal"
    WARNING = "Warning"


class _Vocabulary(str, Enum):
    """A reason and its Event severity (`X.severity`); its value is the API string."""

    severity: Severity

    def __new__(cls, value: str, severity: Severity = Severity.QUIET) -> _Vocabulary:
        member = str.__new__(cls, value)
        member._value_ = value
        member.severity = severity
        return member

    def __str__(self) -> str:
        return str(self.value)


class Reason(_Vocabulary):
    """The TorchrunJob controller's reasons."""

    # Admitted
    ADMITTED = "Admitted", Severity.NORMAL
    QUEUE_NOT_FOUND = "QueueNotFound", Severity.WARNING
    QUEUE_NOT_READY = "QueueNotReady", Severity.WARNING
    INVALID_SPEC = "InvalidSpec", Severity.WARNING
    INVALID_COMMAND = "InvalidCommand", Severity.WARNING
    NAME_CONFLICT = "NameConflict", Severity.WARNING
    SCHEDULER_API_MISSING = "SchedulerAPIMissing", Severity.WARNING
    PODS_FORBIDDEN = "PodsForbidden", Severity.WARNING  # the namespace refuses the worker pods
    # WorkspaceReady
    NO_WORKSPACE = "NoWorkspace", Severity.QUIET
    SYNCED = "Synced", Severity.NORMAL
    SYNCING = "Syncing", Severity.NORMAL
    RELOADING = "Reloading", Severity.NORMAL
    RELOAD_FAILED = "ReloadFailed", Severity.WARNING
    CLAIM_NOT_BOUND = "ClaimNotBound", Severity.WARNING
    SYNC_FAILED = "SyncFailed", Severity.WARNING
    # Running
    ALL_WORKERS_RUNNING = "AllWorkersRunning", Severity.NORMAL
    # Running=True: the ranks run while Kueue holds the autoscaler's growth (a workload slice)
    GROWTH_WAITING_FOR_ADMISSION = "GrowthWaitingForAdmission", Severity.QUIET
    WORKERS_STARTING = "WorkersStarting", Severity.QUIET
    UNSCHEDULABLE = "Unschedulable", Severity.WARNING
    # why workers do not start, in starting.py's precedence after Unschedulable's place
    WAITING_FOR_ADMISSION = "WaitingForAdmission", Severity.QUIET  # quota: routine, the condition says it
    POD_CREATE_FAILED = "PodCreateFailed", Severity.WARNING
    VOLUME_MOUNT_FAILED = "VolumeMountFailed", Severity.WARNING
    IMAGE_PULL_FAILED = "ImagePullFailed", Severity.WARNING
    CONTAINER_CONFIG_ERROR = "ContainerConfigError", Severity.WARNING
    CONTAINER_CRASH_LOOPING = "ContainerCrashLooping", Severity.WARNING
    RESTARTING = "Restarting", Severity.WARNING
    RESTARTED_IN_PLACE = "RestartedInPlace", Severity.WARNING  # the pods stayed: torchrun restarted in them
    WAITING_FOR_ETCD = "WaitingForEtcd", Severity.NORMAL
    ETCD_FAILING = "EtcdFailing", Severity.WARNING
    COMPLETED = "Completed", Severity.QUIET
    FAILED = "Failed", Severity.NORMAL  # Running=False beside a Failed=True that says why
    # Suspended
    SUSPENDED = "Suspended", Severity.NORMAL
    RESUMED = "Resumed", Severity.NORMAL
    # Succeeded / Failed
    SUCCEEDED = "Succeeded", Severity.NORMAL
    PERMANENT_FAILURE = "PermanentFailure", Severity.WARNING
    RESTART_LIMIT_EXCEEDED = "RestartLimitExceeded", Severity.WARNING
    WORKERS_FAILED = "WorkersFailed", Severity.WARNING
    DEADLINE_EXCEEDED = "DeadlineExceeded", Severity.WARNING
    # Progressing (and, with onStall Restart, the attempt's outcome)
    REPORTING = "Reporting", Severity.QUIET
    STALLED = "Stalled", Severity.WARNING
    STARTUP_STALLED = "StartupStalled", Severity.WARNING  # no training step within startupTimeoutSeconds
    REPORTING_LOST = "ReportingLost", Severity.WARNING  # Unknown: no report arrives, never an action
    # Events that are not conditions
    RETRIABLE_FAILURE = "RetriableFailure", Severity.WARNING
    WORKSPACE_RELOADED = "WorkspaceReloaded", Severity.NORMAL
    RESUMED_FROM_CHECKPOINT = "ResumedFromCheckpoint", Severity.NORMAL
    CHECKPOINT_PROBLEM = "CheckpointProblem", Severity.WARNING
    DEPRECATED_FIELD = "DeprecatedField", Severity.WARNING
    # an attempt's outcome (in messages and the restart history), never a condition's reason
    RETRIABLE_LIMIT = "RetriableFailureLimitExceeded", Severity.WARNING


class QueueReason(_Vocabulary):
    """The TorchrunQueue controller's reasons, for `Ready` (its checks in order) and `KaiQueueReady`."""

    READY = "Ready"
    INVALID_SPEC = "InvalidSpec"
    STORAGE_CLASS_NOT_FOUND = "StorageClassNotFound"
    SCHEDULER_NOT_INSTALLED = "SchedulerNotInstalled"
    PARENT_QUEUE_NOT_FOUND = "ParentQueueNotFound"  # kai-scheduler only, in both conditions
    # KaiQueueReady
    KAI_NOT_INSTALLED = "KaiNotInstalled"
    KAI_QUEUE_SYNCED = "KaiQueueSynced"
    KAI_QUEUE_NOT_MANAGED = "KaiQueueNotManaged"
    KAI_QUEUE_REJECTED = "KaiQueueRejected"


class AutoscalerReason(_Vocabulary):
    """The autoscaler's Events on a job it resized, and why it planned the resize."""

    SCALED_UP = "ScaledUp", Severity.NORMAL
    SCALED_DOWN = "ScaledDown", Severity.NORMAL
    # why (a resize's cause: in the Event's message and the log, never an Event's reason)
    FREE_CAPACITY = "FreeCapacity"
    LOAD_ABOVE_TARGET = "LoadAboveTarget"
    PENDING_WORK = "PendingWork"
    OWN_PODS_UNSCHEDULABLE = "OwnPodsUnschedulable"


def severity_of(reason: str) -> Severity:
    """The Event severity of job reason `reason`; a reason not in `Reason` is a Warning."""
    known = _BY_VALUE.get(reason)
    return Severity.WARNING if known is None else known.severity


_BY_VALUE: dict[str, Reason] = {r.value: r for r in Reason}
