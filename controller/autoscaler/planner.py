"""The plan: a cluster snapshot in, the size changes of elastic jobs out. Pure, no I/O.

One pass, in this order:
1. **Reserve** room for the pods already waiting for a node (those of jobs waiting as
   Unschedulable first): the scheduler is about to place them, so no job grows into their room.
   A waiting pod of a job waiting as Unschedulable that finds no room is *unmet demand*.
2. **Shrink**, one node per job, the highest node rank first (rank 0 hosts the rendezvous):
   - a job whose own pods cannot be scheduled gives back a node, down to its minimum;
   - while the load of a GPU resource is above `max_load`, the most-fulfilled jobs using it
     (fulfilment = nodes / maxNodes) give back a node each;
   - while demand is unmet, jobs give back a node each and the waiting pods are placed again:
     the most fulfilled among those whose node would then hold a waiting pod, else the most
     fulfilled whose node could hold one once more is freed there.
Jobs on a Kueue queue with `kueueWorkloadSlices` are never shrunk (`grow_only`): Kueue admits
their growth against its quota and reclaims it by preemption.
3. **Grow** only when nothing shrank and no satisfiable demand is unmet: the least-fulfilled jobs
   first, one node each, when the load of their GPU resource after the change stays at or below
   `max_load` *and* the dry run (`placement.py`) finds a node with the room for one more pod.

Why it converges without oscillating: a job moves at most one node per pass; growing needs the
load *after* the change at or below the target while shrinking needs the load *now* above it, so
the pass after a shrink cannot grow the node back; demand keeps its room reserved until it is
placed. The property tests in test/unit/test_autoscaler_properties.py check it.
"""

from __future__ import annotations

from controller.api.reasons import AutoscalerReason
from controller.autoscaler.model import ClusterSnapshot, ElasticJob, PendingPod, Resize
from controller.autoscaler.placement import FreeCapacity, fits

_EPSILON = 1e-9


def cluster_load(snapshot: ClusterSnapshot) -> dict[str, float]:
    """requested / allocatable of each GPU resource over the snapshot's (schedulable) nodes."""
    return _Pass(snapshot, 1.0).loads()


def plan(snapshot: ClusterSnapshot, max_load: float) -> list[Resize]:
    """The size changes of one pass (module docstring); at most one per job."""
    p = _Pass(snapshot, max_load)
    unmet = p.reserve(snapshot.pending)
    p.shrink_waiting()
    p.shrink_over_target()
    unmet = p.shrink_for(unmet)
    if not p.changes and not p.satisfiable(unmet):
        p.grow()
    return p.changes


class _Pass:
    def __init__(self, snapshot: ClusterSnapshot, max_load: float) -> None:
        self.jobs = snapshot.jobs
        self.max_load = max_load
        self.capacity = FreeCapacity(snapshot.nodes, snapshot.gpu_resources)
        self.allocatable = {
            r: sum(n.allocatable.get(r, 0) for n in snapshot.nodes) for r in snapshot.gpu_resources
        }
        self.used = {
            r: sum(n.allocatable.get(r, 0) - n.free.get(r, 0) for n in snapshot.nodes)
            for r in snapshot.gpu_resources
        }
        self.changes: list[Resize] = []
        self.changed: set[str] = set()

    def loads(self) -> dict[str, float]:
        return {r: self.load(r) for r, total in self.allocatable.items() if total > 0}

    def load(self, resource: str) -> float:
        total = self.allocatable.get(resource, 0)
        return self.used.get(resource, 0) / total if total else 0.0

    def over_target(self, resource: str, extra: int = 0) -> bool:
        total = self.allocatable.get(resource, 0)
        return self.used.get(resource, 0) + extra > self.max_load * total + _EPSILON

    # -- reserving ------------------------------------------------------------------------------

    def reserve(self, pending: tuple[PendingPod, ...]) -> list[PendingPod]:
        """Place the waiting pods (forcing ones first); the forcing ones left over are unmet."""
        unmet = []
        for pod in sorted(pending, key=lambda p: not p.forcing):
            if not self.place(pod) and pod.forcing:
                unmet.append(pod)
        return unmet

    def place(self, pending: PendingPod) -> bool:
        node = self.capacity.best_fit(pending.pod)
        if node is None:
            return False
        self.capacity.take(node, pending.pod.requests)
        return True

    def satisfiable(self, unmet: list[PendingPod]) -> bool:
        """Some unmet pod could run somewhere once room is made (else it must not stop growth)."""
        return any(self.capacity.admits(name, p.pod) for p in unmet for name in self.capacity.nodes)

    # -- shrinking --------------------------------------------------------------------------------

    def shrinkable(self) -> list[ElasticJob]:
        """Jobs that may give back a node this pass, the most fulfilled first."""
        jobs = [
            j for j in self.jobs if j.nodes > j.min_nodes and j.key not in self.changed and not j.grow_only
        ]
        return sorted(jobs, key=lambda j: (-j.fulfilment, -j.nodes, j.key))

    def shrink(self, job: ElasticJob, reason: AutoscalerReason) -> None:
        node = job.placement[-1]
        before = self.load(job.gpu_resource)
        if node is not None:
            self.capacity.give(node, job.pod.requests)
            self.used[job.gpu_resource] = self.used.get(job.gpu_resource, 0) - job.gpus_per_node
        self.record(job, job.nodes - 1, before, node, reason)

    def shrink_waiting(self) -> None:
        for job in self.shrinkable():
            if job.waiting:
                self.shrink(job, AutoscalerReason.OWN_PODS_UNSCHEDULABLE)

    def shrink_over_target(self) -> None:
        for resource in sorted(self.allocatable):
            for job in self.shrinkable():
                if not self.over_target(resource):
                    break
                if job.gpu_resource == resource and job.gpus_per_node and job.placement[-1] is not None:
                    self.shrink(job, AutoscalerReason.LOAD_ABOVE_TARGET)

    def shrink_for(self, unmet: list[PendingPod]) -> list[PendingPod]:
        while unmet:
            jobs = [j for j in self.shrinkable() if j.placement[-1] is not None]
            pick = next((j for j in jobs if self.frees_room(j, unmet)), None) or next(
                (j for j in jobs if any(self.capacity.admits(j.placement[-1] or "", p.pod) for p in unmet)),
                None,
            )
            if pick is None:
                break
            self.shrink(pick, AutoscalerReason.PENDING_WORK)
            unmet = [p for p in unmet if not self.place(p)]
        return unmet

    def frees_room(self, job: ElasticJob, unmet: list[PendingPod]) -> bool:
        """Giving back the job's last node would let a waiting pod fit there at once."""
        node = job.placement[-1] or ""
        free = self.capacity.free[node]
        after = {r: free.get(r, 0) + job.pod.requests.get(r, 0) for r in {*free, *job.pod.requests}}
        return any(fits(after, p.pod.requests) and self.capacity.admits(node, p.pod) for p in unmet)

    # -- growing ------------------------------------------------------------------------------------

    def grow(self) -> None:
        jobs = [j for j in self.jobs if not j.waiting and j.nodes < j.max_nodes]
        # a Kueue job grows again only once its last growth's slice is admitted and placed
        jobs = [j for j in jobs if not (j.grow_only and None in j.placement)]
        for job in sorted(jobs, key=lambda j: (j.fulfilment, j.nodes, j.key)):
            resource, gpus = job.gpu_resource, job.gpus_per_node
            if gpus and (not self.allocatable.get(resource) or self.over_target(resource, gpus)):
                continue
            node = self.capacity.best_fit(job.pod)
            if node is None:
                continue
            before = self.load(resource)
            self.capacity.take(node, job.pod.requests)
            self.used[resource] = self.used.get(resource, 0) + gpus
            self.record(job, job.nodes + 1, before, node, AutoscalerReason.FREE_CAPACITY)

    def record(
        self, job: ElasticJob, to_nodes: int, before: float, node: str | None, reason: AutoscalerReason
    ) -> None:
        after = self.load(job.gpu_resource)
        self.changes.append(
            Resize(job.key, job.nodes, to_nodes, job.gpu_resource, before, after, node, reason)
        )
        self.changed.add(job.key)
