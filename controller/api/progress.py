"""Training progress in the API: the stall policy (job and queue), the stack-dump switch (queue)
and `status.progress` (job).

- `spec.progress` of a job overrides its queue's `spec.progress` field by field (`effective`);
  neither set means no stall timeout: a job is never called stalled unless someone asked.
- `startupTimeoutSeconds` bounds the time from the workers' start to the first training step
  reported (rendezvous, NCCL init and the first batch hang before any record can be written):
  then `StartupStalled` (controller/progress/stall.py `starting`).
- `frameworkHooks` (default true) lets a program that uses the Hugging Face Trainer or Lightning
  report progress, save on the checkpoints volume, save when stopped and resume with no code
  change (controller/tools/python/torchrun_hooks.py); false leaves such programs as they are.
- `status.progress` is what the reporter sidecars last said, written by the controller at most
  once per `--progress-period` per job; `metrics` holds the user's numbers, at most 32 (the
  reporter's and the controller's parser drop the rest, `controller.progress.record`).
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.api.fields import api

MAX_METRICS = 32
_SHORT = {"maxLength": 32}


class OnStall(str, enum.Enum):
    NONE = "None"  # the condition and a Warning Event only
    RESTART = "Restart"  # a whole-job restart, counted against failurePolicy.maxRestarts


@dataclass(frozen=True)
class ProgressPolicy:
    """What silence of the progress reports means: after stallTimeoutSeconds without a new record
    from any rank (once the job reported at least once) while their heartbeats still arrive,
    Progressing=False Stalled; when no report arrives at all, Progressing=Unknown ReportingLost
    (never an action: see controller/progress/stall.py)."""

    stall_timeout_seconds: int | None = field(
        default=None,
        metadata=api(
            "Seconds without a new progress record from any rank after which the job is Stalled; "
            "never stalled when absent (a job that never reports is never stalled).",
            schema={"minimum": 10, "maximum": 7 * 86400, "format": "int32"},
        ),
    )
    on_stall: OnStall | None = field(
        default=None,
        metadata=api(
            "None: the condition and a Warning Event; Restart: also a whole-job restart counted "
            "against failurePolicy.maxRestarts. None when absent."
        ),
    )
    startup_timeout_seconds: int | None = field(
        default=None,
        metadata=api(
            "Seconds from the workers' start (the newest start of the attempt's training containers, "
            "once every worker runs) within which some rank must report a training step (a record "
            "with a step); else Progressing=False StartupStalled and onStall applies. When absent, a "
            "job that reported a step in an earlier attempt gets stallTimeoutSeconds; one that never "
            "did is never called StartupStalled.",
            schema={"minimum": 10, "maximum": 7 * 86400, "format": "int32"},
        ),
    )
    framework_hooks: bool | None = field(
        default=None,
        metadata=api(
            "Whether a program using the Hugging Face Trainer or Lightning gets the hooks that make it "
            "report progress, save its checkpoints on the checkpoints volume, save when the pod is "
            "stopped and resume, with no code change (docs/checkpoints.md). They act only when the "
            "program imports one of those Trainers. True when absent."
        ),
    )


@dataclass(frozen=True)
class EffectivePolicy:
    stall_timeout_seconds: int | None
    on_stall: OnStall
    startup_timeout_seconds: int | None = None
    framework_hooks: bool = True


def effective(job: ProgressPolicy | None, queue: ProgressPolicy | None) -> EffectivePolicy:
    """The job's policy, each field falling back to the queue's."""
    job, queue = job or ProgressPolicy(), queue or ProgressPolicy()
    timeout = job.stall_timeout_seconds
    if timeout is None:
        timeout = queue.stall_timeout_seconds
    on_stall = job.on_stall or queue.on_stall or OnStall.NONE
    startup = job.startup_timeout_seconds
    if startup is None:
        startup = queue.startup_timeout_seconds
    hooks = job.framework_hooks
    if hooks is None:
        hooks = queue.framework_hooks
    return EffectivePolicy(timeout, on_stall, startup, hooks is not False)


@dataclass(frozen=True)
class Debug:
    """Debugging tools the queue's jobs get."""

    stack_dumps: bool = field(
        default=False,
        metadata=api(
            "kubectl torchrun stack may dump the ranks' Python stacks (py-spy in the reporter "
            "sidecar, which then runs as root with SYS_PTRACE; the training container never does). "
            "Off by default: Pod Security's baseline and restricted levels (and OpenShift's "
            "restricted SCC) refuse such a container, and the worker Job could not create its pods."
        ),
    )


@dataclass(frozen=True)
class Progress:
    """Where training is, as the ranks last reported it."""

    step: int | None = field(default=None, metadata=api("Last step reported.", schema={"format": "int64"}))
    total_steps: int | None = field(
        default=None, metadata=api("Steps the run will take, as reported.", schema={"format": "int64"})
    )
    epoch: float | None = field(default=None, metadata=api("Epoch reported."))
    percent: int | None = field(
        default=None, metadata=api("step / totalSteps in whole percent.", schema={"format": "int32"})
    )
    samples_per_second: float | None = field(default=None, metadata=api("Throughput reported."))
    eta: datetime.datetime | None = field(
        default=None, metadata=api("When totalSteps will be reached at the recent rate of steps.")
    )
    metrics: Mapping[str, float] = field(
        default_factory=dict,
        metadata=api(
            "The user's numbers of the last record (e.g. loss), at most 32.",
            schema={"maxProperties": MAX_METRICS},
        ),
    )
    update_time: datetime.datetime | None = field(
        default=None,
        metadata=api("When the training program wrote this record (as its reporter saw it change)."),
    )
    summary: str | None = field(
        default=None,
        metadata=api("`42%`, or `step 1200` without totalSteps: the PROGRESS column.", schema=_SHORT),
    )
    rank: int | None = field(
        default=None, metadata=api("The rank whose record this is.", schema={"format": "int32"})
    )
