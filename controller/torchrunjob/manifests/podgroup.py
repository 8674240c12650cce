"""A job's PodGroup, for the gang schedulers that read one (pure; the I/O is `podgroups.py`).

`build_pod_group(job, queue, topo)`: one PodGroup `<job>` in the job's namespace, of the
scheduler's own kind (`scheduling.run.ai/v2alpha2`, `scheduling.x-k8s.io/v1alpha1`,
`scheduling.volcano.sh/v1beta1`), owned by the TorchrunJob, labelled
`torchrun-job-name`/`torchrun.ai/role: worker`, with `minMember` = the nodes the job needs to
start (`elastic.minNodes` for elastic jobs) and, where the kind has them, the queue and the
priority class of the pods; None for schedulers without one. Coscheduling's also carries
`minResources`, what the gang requests together (`minMember` × one worker pod's requests): its
PreFilter then turns away a gang the cluster's free resources cannot hold as a whole, every pod
with the same words (`resource gap: map[nvidia.com/gpu:8 ...]`), before any of its pods holds a
node at Permit. Without it a gang that cannot fit is tried pod by pod each time, its pods held
at Permit and then rejected together, and the words left on them are only the echo
(`optimistic rejection in PostFilter`). The price: a pod turned away there is retried on a pod
created or a PodGroup changed (Coscheduling's registered events), or after the scheduler's
`--pod-max-in-unschedulable-pods-duration` (5 min by default), not as soon as pods go away.
`scheduleTimeoutSeconds` is left unset: how long a partly placed gang may hold nodes at Permit is
the scheduler's `permitWaitingTimeSeconds`, the cluster operator's setting.
`drift` is the merge patch that brings only the fields written here back (the schedulers' status
and fields stay theirs).
`workload_active_patch` mirrors a job's suspend into its Kueue Workload's `spec.active`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.api import JobTopology, Overridable, Quantity, Scheduler, TorchrunJob, TorchrunQueue
from controller.api.labels import WORKER_ROLE
from controller.meta import Resource
from controller.torchrunjob.manifests.common import labels, owner_reference
from controller.torchrunjob.manifests.scheduling import KAI_QUEUE_LABEL, pod_group_name
from controller.torchrunjob.manifests.worker import worker_requests

KAI_POD_GROUPS = Resource("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup")
COSCHEDULING_POD_GROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
VOLCANO_POD_GROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
VOLCANO_DEFAULT_QUEUE = "default"

POD_GROUP_RESOURCES: dict[Scheduler, Resource] = {
    Scheduler.KAI: KAI_POD_GROUPS,
    Scheduler.COSCHEDULING: COSCHEDULING_POD_GROUPS,
    Scheduler.VOLCANO: VOLCANO_POD_GROUPS,
}
MISSING_API_RETRY = 30.0


def min_member(topo: JobTopology) -> int:
    """How many pods must be placed together: every node, or an elastic job's minimum."""
    return topo.min_nodes if topo.elastic else topo.nodes


def gang_resources(queue: TorchrunQueue, topo: JobTopology) -> dict[str, str]:
    """What the gang requests together: `min_member` worker pods."""
    members = min_member(topo)
    return {name: str(Quantity.parse(v) * members) for name, v in worker_requests(queue, topo).items()}


def gang_priority(job: TorchrunJob, queue: TorchrunQueue) -> str | None:
    """The priority class of the gang: the pods' own (the queue's, or an allowed override)."""
    override = job.spec.overrides
    if (
        override is not None
        and override.priority_class_name
        and Overridable.PRIORITY_CLASS_NAME in queue.spec.allow_overrides
    ):
        return override.priority_class_name
    return queue.spec.scheduling.priority_class_name


def pod_group_spec(job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology) -> dict[str, Any]:
    """The fields of the PodGroup spec this controller owns, for the queue's scheduler."""
    scheduler = queue.spec.scheduling.scheduler
    spec: dict[str, Any] = {"minMember": min_member(topo)}
    if scheduler == Scheduler.KAI:
        spec["queue"] = queue.kai_queue_name
    elif scheduler == Scheduler.VOLCANO:
        spec["queue"] = VOLCANO_DEFAULT_QUEUE
    elif scheduler == Scheduler.COSCHEDULING:
        spec["minResources"] = gang_resources(queue, topo)
    priority = gang_priority(job, queue)
    if priority and scheduler in (Scheduler.KAI, Scheduler.VOLCANO):  # coscheduling has no such field
        spec["priorityClassName"] = priority
    return spec


def build_pod_group(
    job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology
) -> tuple[Resource, dict[str, Any]] | None:
    """The job's PodGroup and where it lives, or None when its scheduler reads none."""
    resource = POD_GROUP_RESOURCES.get(queue.spec.scheduling.scheduler)
    if resource is None:
        return None
    meta_labels = labels(job, WORKER_ROLE)
    if queue.spec.scheduling.scheduler == Scheduler.KAI:
        meta_labels[KAI_QUEUE_LABEL] = queue.kai_queue_name
    manifest = {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {
            "name": pod_group_name(job),
            "namespace": job.namespace,
            "labels": meta_labels,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_group_spec(job, queue, topo),
    }
    return resource, manifest


def drift(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that brings the fields we own back to `desired` ({} when none differ)."""
    patch: dict[str, Any] = {}
    have_spec = existing.get("spec") or {}
    spec = {k: v for k, v in desired["spec"].items() if have_spec.get(k) != v}
    if spec:
        patch["spec"] = spec
    have_labels = existing["metadata"].get("labels") or {}
    want_labels = {k: v for k, v in desired["metadata"]["labels"].items() if have_labels.get(k) != v}
    if want_labels:
        patch["metadata"] = {"labels": want_labels}
    return patch


def workload_active_patch(workload: Mapping[str, Any], suspended: bool) -> dict[str, Any] | None:
    """The patch that makes a Kueue Workload's `spec.active` follow the job's suspend, if needed."""
    active = (workload.get("spec") or {}).get("active", True)
    if active is (not suspended):
        return None
    return {"spec": {"active": not suspended}}
