"""The autoscaler's view of the cluster: plain frozen values, built from the caches (`snapshot.py`)
and read by the planner (`planner.py`), so planning needs no cluster.

Amounts are integers in the unit Kubernetes counts them in: GPUs and other extended resources as
whole units, `cpu` in millicores, `memory` in bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.api.reasons import AutoscalerReason

Resources = Mapping[str, int]


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""  # empty with operator Exists: tolerates everything
    operator: str = "Equal"
    value: str = ""
    effect: str = ""  # empty: every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True)
class Node:
    """A schedulable node: what it offers, what its bound pods leave free, its labels and taints."""

    name: str
    allocatable: Resources
    free: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True)
class PodShape:
    """What one pod asks for and where it may go (nodeSelector and taints; affinity is not modelled)."""

    requests: Resources
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True)
class ElasticJob:
    """An elastic TorchrunJob the autoscaler may resize.

    `placement[i]` is the node of the pod of node rank i (None: not placed yet), one entry per
    node of its current size; a shrink removes the last one (the highest index, never rank 0,
    which hosts the rendezvous), a grow adds one. `waiting`: the job says its pods cannot be
    scheduled (`Running=False Unschedulable`), so it can only give room back.
    """

    key: str
    min_nodes: int
    max_nodes: int
    pod: PodShape
    gpu_resource: str
    placement: tuple[str | None, ...]
    waiting: bool = False
    grow_only: bool = False  # Kueue's: its quota bounds the growth, shrinking is its preemption

    @property
    def nodes(self) -> int:
        return len(self.placement)

    @property
    def gpus_per_node(self) -> int:
        return self.pod.requests.get(self.gpu_resource, 0)

    @property
    def fulfilment(self) -> float:
        return self.nodes / self.max_nodes


@dataclass(frozen=True)
class PendingPod:
    """A pod waiting for a node. `forcing`: it belongs to a job waiting as Unschedulable, so
    elastic jobs shrink to make room for it; any other pending pod only keeps its room from
    being grown into."""

    pod: PodShape
    forcing: bool = False
    owner: str = ""  # for logs: namespace/name of its job, or of the pod


@dataclass(frozen=True)
class ClusterSnapshot:
    nodes: tuple[Node, ...]
    jobs: tuple[ElasticJob, ...]
    pending: tuple[PendingPod, ...] = ()
    gpu_resources: frozenset[str] = frozenset({"nvidia.com/gpu"})


@dataclass(frozen=True)
class Resize:
    """One size change of one job, with the load of its GPU resource before and after it."""

    key: str
    from_nodes: int
    to_nodes: int
    resource: str
    load_before: float
    load_after: float
    node: str | None  # where the dry run placed the new pod, or the node the removed pod frees
    reason: AutoscalerReason  # why the planner made the change

    @property
    def direction(self) -> str:
        return "up" if self.to_nodes > self.from_nodes else "down"
