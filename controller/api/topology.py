"""How many nodes, and GPUs per node, a job runs on, given its queue's node shape.

torchrun starts the same number of processes on every node, so a job is always `nodes` equal
pods. `numNodes` maps directly; the legacy `numGPUs` becomes one node when it fits in one (that
node then requests only `numGPUs` GPUs) and whole nodes when it divides evenly; anything else is
a `FieldError` on `spec.numGPUs` that says which sizes would work. Elastic jobs (always sized in
nodes, the schema enforces it) run between `elastic.minNodes` and `elastic.maxNodes`.
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

    @property
    def procs_per_node(self) -> int:
        """torchrun --nproc-per-node: one process per GPU, one on a CPU-only node."""
        return max(self.gpus_per_node, 1)

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

    def storage_size(self, size_per_gpu: Quantity) -> Quantity:
        """A per-GPU size times the GPUs of the job at its largest (a CPU-only node counts as one)."""
        return size_per_gpu * (self.max_nodes * self.procs_per_node)


def resolve_topology(spec: TorchrunJobSpec, node: NodeResources) -> JobTopology:
    """The job's topology on nodes shaped like `node`; raises `InvalidObjectError` when there is none."""
    if spec.elastic is not None:
        nodes = spec.num_nodes or spec.elastic.min_nodes
        return JobTopology(nodes, node.gpus, spec.elastic.min_nodes, spec.elastic.max_nodes, elastic=True)
    if spec.num_nodes is not None:
        return JobTopology(spec.num_nodes, node.gpus, spec.num_nodes, spec.num_nodes)
    if spec.num_gpus is None:
        raise InvalidObjectError([FieldError("spec.numNodes", "one of numNodes or numGPUs is required")])
    nodes, per_node = _nodes_for_gpus(spec.num_gpus, node.gpus)
    return JobTopology(nodes, per_node, nodes, nodes)


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
