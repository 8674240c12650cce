"""A disrupted rank on the recreate path: the attempt starts again at once, not counted (pure).

A worker pod is disrupted when it carries `DisruptionTarget=True`: evicted (a drain, the API's
eviction), preempted by the scheduler, deleted for a taint of its lost node, or failed by the pod
garbage collector after its node went away. The worker Job's podFailurePolicy ignores it and makes
a new pod for that index; that alone heals nothing when torchrun cannot take the new pod back into
its world — a fixed-size job (no `elastic`) with `distributed.maxRestarts` 0 — because the other
ranks' rendezvous is closed (node 0's torchrun hosts its store). What happened then (the real
node, 2026-11-28): the survivors end on their own (a program that saves on SIGTERM may even exit 0
and be counted done), the replacement's rendezvous fails, and the attempt's failure counts one
restart, 100 s after the eviction.

`disrupted_restart` answers, for such a job on the recreate path, a new attempt at once: a
`Running=False Restarting` condition (a Warning Event) naming the rank, its pod and the
disruption's reason, and `status.disruptions` + 1 — which makes a new attempt
(`TorchrunJobStatus.attempt`), so the next pass deletes the worker Job and makes the next one,
resuming from the newest complete checkpoint — while `restarts`, `restartsByReason` and the
`maxRestarts` budget stay as they are: a disruption is not the training's failure. Once per
attempt: the old attempt's pods are no longer the attempt's. It sees a disrupted pod while the
cache holds it — an evicted or tainted-out pod terminates for its grace period, one of a NotReady
node stays until its kubelet or our garbage collector ends it; a pod the pod GC fails and deletes
at once is held only by the worker Job's tracking finalizer, about a second: one missed leaves
the attempt to end as before (its failure counted).

Not a disruption here: a pod our hot reload evicts to roll the workers onto a new generation
(`rolled_by_reload`, the test `reload.py` evicts by), and any pod of a worker Job that is
suspended (Kueue takes its workers back so) or of a job that restarts in place (`inplace.py` makes
the survivors rejoin) or is elastic (the autoscaler shrinks it by evicting, and torchrun's elastic
rendezvous takes a replacement back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from controller.api import JobConditionType as C
from controller.api import TorchrunJob, TorchrunJobStatus, parse_time
from controller.api.reasons import Reason
from controller.pods import disruption, node_rank
from controller.torchrunjob.steps import Decision, Observed


def heals_itself(job: TorchrunJob) -> bool:
    """torchrun takes a replaced node back into its world: an elastic job, or one whose torchrun
    restarts its workers itself (`distributed.maxRestarts` above 0)."""
    return job.spec.elastic is not None or job.spec.distributed.max_restarts > 0


def rolled_by_reload(pod: Mapping[str, Any], status: TorchrunJobStatus, made_for: int) -> bool:
    """A pod the hot reload evicts (`reload.HotReload.roll` evicts by this very test): the worker
    Job was made for an older workspace generation (`made_for`) than the one in use, and the pod
    was made before that one was synced."""
    synced_at = status.workspace_sync_time
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    if synced_at is None or status.workspace_generation <= made_for or not created:
        return False
    return parse_time(created) <= synced_at


def disrupted_restart(
    job: TorchrunJob,
    pods: Sequence[Mapping[str, Any]],
    status: TorchrunJobStatus,
    *,
    made_for: int,
    suspended: bool,
) -> Decision | None:
    """The module doc's decision for the attempt's `pods` (those its worker Job controls, made for
    workspace generation `made_for`, `suspended` or not); None when no rank was disrupted or the
    job heals itself."""
    if suspended or heals_itself(job):
        return None
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        cond = disruption(pod)
        if cond is None or rolled_by_reload(pod, status, made_for):
            continue
        meta = pod.get("metadata") or {}
        rank = node_rank(pod)
        why = f"{cond.get('reason') or 'DisruptionTarget'}: {cond.get('message') or 'no message'}"
        message = (
            f"node rank {'?' if rank is None else rank}'s pod {meta.get('name')} was disrupted ({why}): "
            "every rank starts again at once from the newest checkpoint, not counted as a restart "
            f"(disruption {status.disruptions + 1})"
        )
        return Decision(
            conditions=(Observed(C.RUNNING, False, Reason.RESTARTING, message),),
            changes={"disruptions": status.disruptions + 1, "retriable_failures": 0},
            stop=True,
        )
    return None
