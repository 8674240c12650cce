"""Labels and annotations the controller writes: they are API (SPEC §4), so they live here once.

Labels select objects for caches and for people (`kubectl get pods -l torchrun-job-name=x`);
they never prove ownership — see `controller.meta.is_controlled_by`. `annotated_generation`
reads the generation annotation back, for every reader (controller, endpoint, plugin).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

JOB_LABEL: Final = "torchrun-job-name"  # every object made for a job
ROLE_LABEL: Final = "torchrun.ai/role"  # one of the roles below
# the roles: the worker Job, its pods, the headless Service, the PodGroup and the checkpoints claim
WORKER_ROLE: Final = "worker"
SYNC_ROLE: Final = "sync"  # sync pods and the workspace claim
ETCD_ROLE: Final = "etcd"  # the managed etcd pod and its Service
QUEUE_LABEL: Final = "torchrun.ai/queue"  # worker pods and KAI Queues: the TorchrunQueue
PERSIST_LABEL: Final = "torchrun.ai/persist"  # "true" on persisted checkpoints: never deleted by us
# "true" on the controller replica that leads (its own pod): the progress Service selects it, so
# reports reach only the leader (controller/leaderelection/podlabel.py)
LEADER_LABEL: Final = "torchrun.ai/leader"

# on a worker Job and a managed etcd pod: the whole-job restart (attempt) it was made for
RESTART_ANNOTATION: Final = "torchrun.ai/restart"
# on a sync pod: the generation it syncs; on a worker Job: the generation in use when it was made
GENERATION_ANNOTATION: Final = "torchrun.ai/workspace-generation"


def annotated_generation(obj: Mapping[str, Any] | None) -> int:
    """The workspace generation a sync pod or worker Job was made for (`GENERATION_ANNOTATION`;
    0: none, or unreadable)."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    try:
        return int(annotations.get(GENERATION_ANNOTATION, "0"))
    except (TypeError, ValueError):
        return 0
