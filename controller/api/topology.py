"""How many nodes, and GPUs per node, a job runs on, given its queue's node shape.

torchrun starts the same number of processes on every node, so a job is always `nodes` equal
pods: one process per GPU, or on a CPU-only queue (`gpus: 0`) one per whole CPU of the queue's
`nodeResources.cpus` (1 when it names none or less than one). `numNodes` maps directly; the
legacy `numGPUs` becomes one node when it fits in one (that node then requests only `numGPUs`
GPUs) and whole nodes when it divides evenly; anything else is a `FieldError` on `spec.numGPUs`
that says which sizes would work. Elastic jobs (always sized in nodes, the schema enforces it)
run between `elastic.minNodes` and `elastic.maxNodes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.api.fielderrors import FieldError, InvalidObjectError
from controller.api.quantity import Quantity
from controller.api.torchrunjob import TorchrunJobSpec
from controller.api.torchrunqueue import NodeResources


@dataclass(frozen=True)
class JobTopology:
    """The resolved size of a job; `nodes` is the initial size of an elastic job."""

    nodes: int
    gpus_per_node: int
    min_nodes: int
    max_nodes: int
    elastic: bool = False
    cpu_procs_per_node: int = 1  # processes per node of a CPU-only queue

    @property
    def procs_per_node(self) -> int:
        """torchrun --nproc_per_node: one process per GPU; `cpu_procs_per_node` on a CPU-only node."""
        return self.gpus_per_node or self.cpu_procs_per_node

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def world_size(self) -> int:
        """Processes in the whole job (WORLD_SIZE)."""
        return self.nodes * self.procs_per_node

    @property
    def nnodes(self) -> str:
        """torchrun --nnodes: `N`, or `MIN:MAX` for an elastic job."""
        return f"{self.min_nodes}:{self.max_nodes}" if self.elastic else str(self.nodes)

    @property
    def gpu_slots_per_node(self) -> int:
        """GPUs per node for per-GPU sizes (/dev/shm, storage): a CPU-only node counts as one."""
        return max(self.gpus_per_node, 1)

    def storage_size(self, size_per_gpu: Quantity) -> Quantity:
        """A per-GPU size times the GPUs of the job at its largest (a CPU-only node counts as one)."""
        return size_per_gpu * (self.max_nodes * self.gpu_slots_per_node)


def resolve_topology(spec: TorchrunJobSpec, node: NodeResources) -> JobTopology:
    """The job's topology on nodes shaped like `node`; raises `InvalidObjectError` when there is none."""
    cpu_procs = cpu_processes(node)
    if spec.elastic is not None:
        nodes = spec.num_nodes or spec.elastic.min_nodes
        low, high = spec.elastic.min_nodes, spec.elastic.max_nodes
        return JobTopology(nodes, node.gpus, low, high, elastic=True, cpu_procs_per_node=cpu_procs)
    if spec.num_nodes is not None:
        n = spec.num_nodes
        return JobTopology(n, node.gpus, n, n, cpu_procs_per_node=cpu_procs)
    if spec.num_gpus is None:
        raise InvalidObjectError([FieldError("spec.numNodes", "one of numNodes or numGPUs is required")])
    nodes, per_node = _nodes_for_gpus(spec.num_gpus, node.gpus)
    return JobTopology(nodes, per_node, nodes, nodes)


def cpu_processes(node: NodeResources) -> int:
    """Processes per node on a CPU-only queue: its whole CPUs (`cpus: 96` → 96), at least 1."""
    if node.cpus is None:
        return 1
    return max(int(node.cpus.amount), 1)


def _nodes_for_gpus(gpus: int, per_node: int) -> tuple[int, int]:
    if per_node == 0:
        raise InvalidObjectError(
            [
                FieldError(
                    "spec.numGPUs", "the queue's nodes have no GPUs (nodeResources.gpus: 0); use numNodes"
                )
            ]
        )
    if gpus <= per_node:
        return 1, gpus
    if gpus % per_node == 0:
        return gpus // per_node, per_node
    lower, upper = gpus // per_node * per_node, (gpus // per_node + 1) * per_node
    raise InvalidObjectError(
        [
            FieldError(
                "spec.numGPUs",
                f"{gpus} GPUs do not divide into nodes of {per_node} GPUs; torchrun needs the same "
                f"number of processes on every node (use {lower} or {upper} GPUs, or numNodes)",
            )
        ]
    )
