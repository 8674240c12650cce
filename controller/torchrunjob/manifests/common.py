"""What every object of a job shares (pure): names, labels, the owner reference, placement, and
the security context of the containers that run as the training does.

Names and labels are API (SPEC §4): every object carries `torchrun-job-name=<job>` and
`torchrun.ai/role`, and a controller owner reference to the TorchrunJob (persisted checkpoints
claims excepted: `storage.py`). Placement — nodeSelector, tolerations, affinity, priority — is the
queue's, plus what the queue allows the job to override. `nodeResources.gpuType` is informational
(SPEC §3): it is shown and exported, never turned into a node selector, because real clusters
label GPUs in their own words; placement is `scheduling.nodeSelector`.

`training_security_context(queue)` is what the torchrun container and the init containers that
run as it does (`prepare`, the code copy) get: what Pod Security's `restricted` level asks of a
container — no privilege escalation, every capability dropped — **under** the queue's
`securityContext` (default `runAsNonRoot: true`), whose own fields win: a platform engineer who
writes `capabilities`, `allowPrivilegeEscalation` or `privileged` on a queue means it, and the
namespace's policy then decides (`pod_admission.py` says so on the job). `capabilities` merge by
key (`drop: [ALL]` stays beside a queue's `add`); `allowPrivilegeEscalation: false` is left out for
a queue that asks for `privileged` or `SYS_ADMIN`, which the API refuses beside it. The
RuntimeDefault seccomp profile is set on the worker pod (`worker_pod_security_context`), so a
container's own profile (the queue's) still wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.api import (
    JOB_KIND,
    JOB_LABEL,
    RESTART_ANNOTATION,
    ROLE_LABEL,
    Overridable,
    TorchrunJob,
    TorchrunQueue,
    to_json,
)
from controller.api.resources import controller_reference
from controller.pods import COMPLETION_INDEX_ANNOTATION

_SYS_ADMIN = frozenset({"SYS_ADMIN", "CAP_SYS_ADMIN"})


def worker_pod_security_context() -> dict[str, Any]:
    """The worker pod's own securityContext: the RuntimeDefault seccomp profile (module doc)."""
    return {"seccompProfile": {"type": "RuntimeDefault"}}


def training_security_context(queue: TorchrunQueue) -> dict[str, Any]:
    """The securityContext of the containers that run as the training does (module doc)."""
    own: dict[str, Any] = to_json(queue.spec.security_context)
    capabilities = {"drop": ["ALL"], **(own.get("capabilities") or {})}
    merged: dict[str, Any] = {**own, "capabilities": capabilities}
    if not own.get("privileged") and not _SYS_ADMIN & set(capabilities.get("add") or ()):
        merged = {"allowPrivilegeEscalation": False, **merged}
    return merged


def node_rank_env(name: str) -> dict[str, Any]:
    """Variable `name` of a worker pod's container: its node rank (the Indexed Job's completion
    index, from the pod's annotation)."""
    return {
        "name": name,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}},
    }


def labels(job: TorchrunJob, role: str) -> dict[str, str]:
    return {JOB_LABEL: job.name, ROLE_LABEL: role}


def owner_reference(job: TorchrunJob) -> dict[str, Any]:
    return controller_reference(JOB_KIND, job.name, job.metadata.uid)


def object_metadata(job: TorchrunJob, name: str, role: str) -> dict[str, Any]:
    """Name, namespace, our labels and the controller owner reference of an object of `job`."""
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": labels(job, role),
        "ownerReferences": [owner_reference(job)],
    }


def allowed(job: TorchrunJob, queue: TorchrunQueue, field: Overridable) -> bool:
    """The job overrides `field` and its queue allows that."""
    return job.spec.overrides is not None and field in queue.spec.allow_overrides


def placement(job: TorchrunJob, queue: TorchrunQueue) -> dict[str, Any]:
    """nodeSelector, tolerations, affinity and priorityClassName of the job's pods on `queue`."""
    sched = queue.spec.scheduling
    overrides = job.spec.overrides
    node_selector = dict(sched.node_selector)
    tolerations = [to_json(t) for t in sched.tolerations]
    priority = sched.priority_class_name
    if overrides is not None:
        if allowed(job, queue, Overridable.NODE_SELECTOR):
            node_selector.update(overrides.node_selector)
        if allowed(job, queue, Overridable.TOLERATIONS):
            tolerations += [to_json(t) for t in overrides.tolerations]
        if allowed(job, queue, Overridable.PRIORITY_CLASS_NAME) and overrides.priority_class_name:
            priority = overrides.priority_class_name
    out: dict[str, Any] = {}
    if node_selector:
        out["nodeSelector"] = node_selector
    if tolerations:
        out["tolerations"] = tolerations
    if sched.affinity:
        out["affinity"] = to_json(sched.affinity)
    if priority:
        out["priorityClassName"] = priority
    return out


def image_of(job: TorchrunJob, queue: TorchrunQueue) -> str:
    o = job.spec.overrides
    if o is not None and o.image and allowed(job, queue, Overridable.IMAGE):
        return o.image
    return queue.spec.image


def working_dir_of(job: TorchrunJob, queue: TorchrunQueue) -> str:
    o = job.spec.overrides
    if o is not None and o.working_dir and allowed(job, queue, Overridable.WORKING_DIR):
        return o.working_dir
    return queue.spec.working_dir or job.spec.workspace.mount_path


def restart_of(obj: Mapping[str, Any]) -> int:
    """The whole-job restart a worker Job or managed etcd pod was made for (-1: unreadable, so
    not current)."""
    try:
        return int((obj["metadata"].get("annotations") or {}).get(RESTART_ANNOTATION, "0"))
    except ValueError:
        return -1
