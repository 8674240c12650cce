"""What checkpoints add to a worker pod (pure; docs/checkpoints.md).

`worker_checkpoint(job, queue, restart)` returns a fragment `worker.build_worker_job` composes:
- the torchrun container's environment: `TORCHRUN_ATTEMPT` (the whole-job restart),
  `TORCHRUN_STOP_SIGNAL=SIGTERM` (what the controller's deliberate stops send: saving then is
  expected), `TORCHRUN_FRAMEWORK_HOOKS` (`1`, or `0` when the effective `progress.frameworkHooks`
  is false: the pod's `sitecustomize` then hooks nothing); with the queue's checkpoints volume,
  `TORCHRUN_CHECKPOINT_DIR` (its mount path: the claim is the job's own, so the job's root is the
  whole volume);
- what the `prepare` init container needs to choose the checkpoint to resume from (`tools.py`):
  `--checkpoints <root> --attempt <restart>`, `--keep N` (`storage.checkpoints.keep`, or the job's
  `overrides.checkpointsKeep` when the queue allows `checkpointsKeep`) and
  `--s3 URI` (the job's own sub-prefix of `storage.checkpoints.s3`: `mirror_prefix`; its Secret as
  `envFrom`), the checkpoints volume mounted
  at the same path, and `TORCHRUN_NODE_RANK` from the completion index (rank 0 prunes, mirrors
  and reports);
- the pod's `terminationGracePeriodSeconds`: the queue's (default 120), the time between SIGTERM
  and SIGKILL whenever the controller stops pods on purpose.
`TORCHRUN_RESUME_FROM` is not here: it is decided at each start, in the pod (`/opt/torchrun/env`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.api import Overridable, TorchrunJob, TorchrunQueue
from controller.api.progress import effective
from controller.torchrunjob.manifests.common import allowed, node_rank_env
from controller.torchrunjob.manifests.storage import CHECKPOINTS_VOLUME
from controller.torchrunjob.manifests.tools import PrepareInputs

STOP_SIGNAL = "SIGTERM"
PERSISTED = "persisted"  # the sub-prefix resubmissions of a job on a persisted claim share


def mirror_prefix(uri: str, job: TorchrunJob, *, persist: bool) -> str:
    """The job's own part of the queue's S3 mirror `uri` (docs/checkpoints.md, "The S3 mirror").

    Guarantees: it is `<uri>/<namespace>/<job name>/<one more part>/` with exactly one `/` between
    the queue's prefix and the namespace (a prefix without a trailing `/` is normalised), so no two
    namespaces and no two job names share a key. The last part is `persisted` on a queue whose
    claim persists (a resubmission of the name continues from the copies the earlier job left, as
    it continues from its claim), else `job-<UID>`: a new job of an earlier job's name restores
    nothing that job left. Namespaces and job names are DNS labels and UIDs hex and `-`, so every
    part is a plain key segment."""
    base = uri if uri.endswith("/") else uri + "/"
    last = PERSISTED if persist else f"job-{job.metadata.uid}"
    return f"{base}{job.namespace}/{job.name}/{last}/"


def hooks_on(job: TorchrunJob, queue: TorchrunQueue) -> bool:
    """The effective `spec.progress.frameworkHooks`: the job's, else the queue's, else true."""
    return effective(job.spec.progress, queue.spec.progress).framework_hooks


@dataclass(frozen=True)
class WorkerCheckpoint:
    """The checkpoint fragment of a worker pod (module doc)."""

    env: list[dict[str, Any]] = field(default_factory=list)  # of the torchrun container
    prepare: PrepareInputs = field(default_factory=PrepareInputs)
    termination_grace_period_seconds: int = 120


def worker_checkpoint(job: TorchrunJob, queue: TorchrunQueue, *, restart: int) -> WorkerCheckpoint:
    """The fragment of the module doc."""
    cp = queue.spec.storage.checkpoints
    env: list[dict[str, Any]] = [
        {"name": "TORCHRUN_ATTEMPT", "value": str(restart)},
        {"name": "TORCHRUN_STOP_SIGNAL", "value": STOP_SIGNAL},
        {"name": "TORCHRUN_FRAMEWORK_HOOKS", "value": "1" if hooks_on(job, queue) else "0"},
    ]
    prepare = PrepareInputs()
    if cp.enabled:
        env.append({"name": "TORCHRUN_CHECKPOINT_DIR", "value": cp.mount_path})
        args = ["--checkpoints", cp.mount_path, "--attempt", str(restart)]
        keep = cp.keep
        overrides = job.spec.overrides
        if (
            overrides is not None
            and overrides.checkpoints_keep
            and allowed(job, queue, Overridable.CHECKPOINTS_KEEP)
        ):
            keep = overrides.checkpoints_keep
        if keep is not None:
            args += ["--keep", str(keep)]
        env_from: list[dict[str, Any]] = []
        if cp.s3 is not None:
            args += ["--s3", mirror_prefix(cp.s3.uri, job, persist=cp.persist)]
            if cp.s3.secret:
                env_from.append({"secretRef": {"name": cp.s3.secret}})
        prepare = PrepareInputs(
            args=args,
            env=[node_rank_env("TORCHRUN_NODE_RANK")],
            mounts=[{"name": CHECKPOINTS_VOLUME, "mountPath": cp.mount_path}],
            env_from=env_from,
        )
    return WorkerCheckpoint(env, prepare, queue.spec.termination_grace_period_seconds)
