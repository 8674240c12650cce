"""`build_snapshot`: the cached nodes, pods, TorchrunJobs and TorchrunQueues in, the planner's
`ClusterSnapshot` out. Pure (the caller hands it what the listers hold), so it is tested and
benchmarked without a cluster.

What it decides:
- **Nodes**: only schedulable ones (not cordoned, `Ready`), with their taints; a node's free
  amounts are its allocatable minus the requests of the pods bound to it that are neither
  finished nor terminating (a terminating pod is leaving: counting it would make the next pass
  shrink again for room already on its way).
- **Elastic jobs the autoscaler may resize**: `elastic.minNodes < maxNodes`, on a queue whose
  scheduler is not Kueue or KAI (they own admission and quota: we do not fight them) — but for
  a Kueue queue with `kueueWorkloadSlices`, whose jobs it may only *grow* (each growth is a
  workload slice that Kueue admits within its quota, or holds: Kueue's quota, not the
  autoscaler, bounds it; shrinking stays Kueue's, by preemption), GPUs per
  node > 0, `distributed.maxRestarts` ≥ 1 (for torchrun a node leaving is a failure of the
  survivors' workers, answered by a restart and a new rendezvous: with no restart to spend, a
  shrink would fail the job), not suspended, not deleted, not finished, and `Running=True` — or
  `Running=False Unschedulable`, which may only shrink. Restarting or starting jobs are left
  alone. Their size is `status.desiredNodes` (else `status.nodes`, else `numNodes`) within the
  bounds; pods of higher node ranks are leaving and count as free.
- **Pending pods**: unbound, live pods that request a GPU resource, plus one per node rank of a
  resizable job with no pod placed yet (a grow in flight). Those of TorchrunJobs waiting as
  `Running=False Unschedulable` (other than resizable ones) are *forcing*: room is made for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.api.labels import JOB_LABEL, ROLE_LABEL, WORKER_ROLE
from controller.api.reasons import Reason
from controller.autoscaler.model import (
    ClusterSnapshot,
    ElasticJob,
    Node,
    PendingPod,
    PodShape,
    Taint,
    Toleration,
)
from controller.autoscaler.resources import node_allocatable, pod_requests
from controller.meta import Obj
from controller.pods import is_live, node_rank

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# schedulers that admit work against a quota of their own: their queues are left alone
SCHEDULERS_LEFT_ALONE = frozenset({"kueue", "kai-scheduler"})


def _key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def _condition(obj: Obj, ctype: str) -> Obj | None:
    conditions: tuple[Obj, ...] = (obj.get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c.get("type") == ctype), None)


def _is_true(obj: Obj, ctype: str) -> bool:
    cond = _condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"


def schedulable(node: Obj) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    return _is_true(node, "Ready")


def to_node(node: Obj) -> Node:
    allocatable = node_allocatable(node)
    taints = tuple(
        Taint(t.get("key", ""), t.get("value", ""), t.get("effect", ""))
        for t in (node.get("spec") or {}).get("taints") or ()
    )
    labels = dict((node["metadata"].get("labels") or {}).items())
    return Node(node["metadata"]["name"], allocatable, allocatable, labels, taints)


def pod_shape(pod: Obj) -> PodShape:
    spec = pod.get("spec") or {}
    tolerations = tuple(
        Toleration(t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", ""))
        for t in spec.get("tolerations") or ()
    )
    return PodShape(pod_requests(pod), dict((spec.get("nodeSelector") or {}).items()), tolerations)


def _worker_of(pod: Obj) -> str | None:
    """`namespace/name` of the TorchrunJob whose worker the pod is, by our labels (reading only:
    a wrong guess costs a planning mistake, never a write to someone else's object)."""
    labels = pod["metadata"].get("labels") or {}
    name = labels.get(JOB_LABEL)
    if not name or labels.get(ROLE_LABEL) != WORKER_ROLE:
        return None
    return f"{pod['metadata'].get('namespace', '')}/{name}"


@dataclass(frozen=True)
class _Candidate:
    key: str
    min_nodes: int
    max_nodes: int
    size: int
    gpu_resource: str
    waiting: bool
    grow_only: bool


@dataclass(frozen=True)
class QueueSettings:
    """What the autoscaler reads of a TorchrunQueue."""

    scheduler: str
    gpu_resource: str
    workload_slices: bool = False  # a Kueue queue whose Kueue runs elastic jobs as slices

    @property
    def resizable(self) -> bool:
        """The autoscaler may resize the queue's jobs (grow only, on a Kueue queue)."""
        return self.scheduler not in SCHEDULERS_LEFT_ALONE or self.grow_only

    @property
    def grow_only(self) -> bool:
        return self.scheduler == "kueue" and self.workload_slices


def queue_settings(queues: Iterable[Obj]) -> dict[str, QueueSettings]:
    """Queue name → its settings."""
    out = {}
    for q in queues:
        spec = q.get("spec") or {}
        scheduler = (spec.get("scheduling") or {}).get("scheduler") or "default"
        resource = (spec.get("nodeResources") or {}).get("gpuResourceName") or DEFAULT_GPU_RESOURCE
        slices = bool(spec.get("kueueWorkloadSlices"))
        out[q["metadata"]["name"]] = QueueSettings(scheduler, resource, slices)
    return out


def elastic_candidate(job: Obj, queues: Mapping[str, QueueSettings]) -> bool:
    """The job is elastic on a queue the autoscaler may resize on, live and not suspended: what
    `candidate` asks before it looks at how the job is doing."""
    spec = job.get("spec") or {}
    elastic = spec.get("elastic") or {}
    low, high = int(elastic.get("minNodes") or 0), int(elastic.get("maxNodes") or 0)
    queue = queues.get(spec.get("jobQueue") or "")
    if not (0 < low < high) or queue is None or not queue.resizable:
        return False
    if spec.get("suspend") or job["metadata"].get("deletionTimestamp"):
        return False
    if int((spec.get("distributed") or {}).get("maxRestarts") or 0) < 1:
        return False
    return not (_is_true(job, "Succeeded") or _is_true(job, "Failed"))


def candidate(job: Obj, queues: Mapping[str, QueueSettings]) -> _Candidate | None:
    """The job as a resizable elastic job, or None when the autoscaler leaves it alone."""
    if not elastic_candidate(job, queues):
        return None
    spec, status = job.get("spec") or {}, job.get("status") or {}
    elastic = spec.get("elastic") or {}
    low, high = int(elastic.get("minNodes") or 0), int(elastic.get("maxNodes") or 0)
    queue = queues[spec.get("jobQueue") or ""]
    running = _condition(job, "Running")
    if running is None:
        return None
    waiting = running.get("status") != "True"
    if waiting and (running.get("reason") != Reason.UNSCHEDULABLE or queue.grow_only):
        return None  # starting, restarting, a slice Kueue holds...: left alone
    size = status.get("desiredNodes") or status.get("nodes") or spec.get("numNodes") or low
    size = min(max(int(size), low), high)
    return _Candidate(_key(job), low, high, size, queue.gpu_resource, waiting, queue.grow_only)


def build_snapshot(
    nodes: Iterable[Obj], pods: Iterable[Obj], jobs: Iterable[Obj], queues: Iterable[Obj]
) -> ClusterSnapshot:
    settings = queue_settings(queues)
    gpu_resources = frozenset({DEFAULT_GPU_RESOURCE, *(q.gpu_resource for q in settings.values())})
    schedulable_nodes = [to_node(n) for n in nodes if schedulable(n)]
    free = {n.name: dict(n.free) for n in schedulable_nodes}
    jobs = list(jobs)
    candidates = {c.key: c for c in (candidate(j, settings) for j in jobs) if c is not None}
    forcing = {
        _key(j)
        for j in jobs
        if _key(j) not in candidates
        and (cond := _condition(j, "Running")) is not None
        and cond.get("status") == "False"
        and cond.get("reason") == Reason.UNSCHEDULABLE
    }
    placement: dict[str, list[str | None]] = {k: [None] * c.size for k, c in candidates.items()}
    shapes: dict[str, PodShape] = {}
    pending: list[PendingPod] = []
    for pod in pods:
        if not is_live(pod):
            continue
        owner = _worker_of(pod)
        job = candidates.get(owner) if owner else None
        node = (pod.get("spec") or {}).get("nodeName")
        if job is not None:
            assert owner is not None
            index = node_rank(pod)
            if index is None or index >= job.size:
                continue  # leaving: a shrink already chose it
            shapes.setdefault(owner, pod_shape(pod))
            placement[owner][index] = node if node in free else None
        if node:
            if node in free:
                for name, n in pod_requests(pod).items():
                    free[node][name] = free[node].get(name, 0) - n
        elif job is None:
            shape = pod_shape(pod)
            if any(shape.requests.get(r, 0) > 0 for r in gpu_resources):
                pending.append(PendingPod(shape, owner in forcing, owner or _key(pod)))
    elastic: list[ElasticJob] = []
    for key, c in candidates.items():
        known = shapes.get(key)
        if known is None or known.requests.get(c.gpu_resource, 0) <= 0:
            continue  # no pod to learn its shape from, or no GPU: nothing to plan
        slots = tuple(placement[key])
        elastic.append(
            ElasticJob(key, c.min_nodes, c.max_nodes, known, c.gpu_resource, slots, c.waiting, c.grow_only)
        )
        if not c.waiting:
            pending.extend(PendingPod(known, False, key) for slot in slots if slot is None)
    out_nodes = tuple(
        Node(n.name, n.allocatable, free[n.name], n.labels, n.taints) for n in schedulable_nodes
    )
    return ClusterSnapshot(out_nodes, tuple(elastic), tuple(pending), gpu_resources)
