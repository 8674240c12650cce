"""The autoscaler's planner, table-driven: a cluster snapshot in, the size changes out.

Nodes have 8 GPUs unless a case says otherwise; `used` is what other (rigid) work holds on each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from controller.api.reasons import AutoscalerReason
from controller.autoscaler.model import (
    ClusterSnapshot,
    ElasticJob,
    Node,
    PendingPod,
    PodShape,
    Taint,
    Toleration,
)
from controller.autoscaler.planner import cluster_load, plan

GPU = "nvidia.com/gpu"


def shape(gpus: int = 8, **kw: object) -> PodShape:
    return PodShape({GPU: gpus}, **kw)  # type: ignore[arg-type]


@dataclass
class Case:
    """Nodes by name with the GPUs other work uses there; elastic jobs with their pods' nodes."""

    id: str
    used: Mapping[str, int]
    jobs: list[ElasticJob] = field(default_factory=list)
    pending: list[PendingPod] = field(default_factory=list)
    max_load: float = 1.0
    expect: list[tuple[str, int, int, str]] = field(default_factory=list)  # key, from, to, reason
    taints: Mapping[str, tuple[Taint, ...]] = field(default_factory=dict)
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    capacity: int = 8


def job(key: str, nodes: tuple[str | None, ...], low: int, high: int, **kw: object) -> ElasticJob:
    pod = kw.pop("pod", shape())
    return ElasticJob(key, low, high, pod, GPU, nodes, **kw)  # type: ignore[arg-type]


def snapshot(case: Case) -> ClusterSnapshot:
    free = {name: case.capacity - used for name, used in case.used.items()}
    for j in case.jobs:
        for node in j.placement:
            if node is not None:
                free[node] -= j.gpus_per_node
    nodes = tuple(
        Node(
            name,
            {GPU: case.capacity},
            {GPU: free[name]},
            case.labels.get(name, {}),
            case.taints.get(name, ()),
        )
        for name in case.used
    )
    return ClusterSnapshot(nodes, tuple(case.jobs), tuple(case.pending), frozenset({GPU}))


FOUR_FREE = {"a": 0, "b": 0, "c": 0, "d": 0}

CASES = [
    Case("empty cluster: nothing to plan", used={}),
    Case("nodes but no elastic job", used=FOUR_FREE),
    Case(
        "free nodes: the job grows by one node per pass",
        used=FOUR_FREE,
        jobs=[job("ns/e", ("a",), 1, 4)],
        expect=[("ns/e", 1, 2, AutoscalerReason.FREE_CAPACITY)],
    ),
    Case(
        "full cluster: nothing grows, nothing shrinks at a load of 1.0 with a target of 1.0",
        used={"a": 0, "b": 8, "c": 8, "d": 8},
        jobs=[job("ns/e", ("a",), 1, 4)],
    ),
    Case(
        "fragmentation: a job of 8-GPU nodes does not grow into 4+4+4 free GPUs",
        used={"a": 0, "b": 4, "c": 4, "d": 4},
        jobs=[job("ns/e", ("a",), 1, 4)],
    ),
    Case(
        "fragmentation: a job of 4-GPU nodes does",
        used={"a": 0, "b": 4, "c": 4, "d": 4},
        jobs=[job("ns/e", ("a", "a"), 1, 4, pod=shape(4))],
        expect=[("ns/e", 2, 3, AutoscalerReason.FREE_CAPACITY)],
    ),
    Case(
        "the load after the change must stay within the target: 24/32 fits 0.75, 32/32 does not",
        used={"a": 0, "b": 0, "c": 0, "d": 0},
        jobs=[job("ns/x", ("b",), 1, 4), job("ns/y", ("c",), 1, 4)],
        max_load=0.75,
        expect=[("ns/x", 1, 2, AutoscalerReason.FREE_CAPACITY)],
    ),
    Case(
        "fairness: the least-fulfilled job gets the one free node",
        used={"a": 0, "b": 8, "c": 0, "d": 8, "e": 0},
        jobs=[job("ns/big", ("a",), 1, 2), job("ns/small", ("c",), 1, 8)],
        expect=[("ns/small", 1, 2, AutoscalerReason.FREE_CAPACITY)],
    ),
    Case(
        "several jobs compete: each grows one node, least fulfilled first, until the room is gone",
        used={"a": 0, "b": 0, "c": 0, "d": 0, "e": 0, "f": 8},
        jobs=[
            job("ns/half", ("a",), 1, 2, pod=shape(8)),
            job("ns/quarter", ("d",), 1, 4, pod=shape(8)),
            job("ns/eighth", ("e",), 1, 8, pod=shape(8)),
        ],
        expect=[
            ("ns/eighth", 1, 2, AutoscalerReason.FREE_CAPACITY),
            ("ns/quarter", 1, 2, AutoscalerReason.FREE_CAPACITY),
        ],
    ),
    Case(
        "a Kueue job grows one node per pass like any other: Kueue's quota is the bound",
        used=FOUR_FREE,
        jobs=[job("ns/k", ("a",), 1, 4, grow_only=True)],
        expect=[("ns/k", 1, 2, AutoscalerReason.FREE_CAPACITY)],
    ),
    Case(
        "a Kueue job whose last growth Kueue has not admitted (its pod unplaced) does not grow again",
        used=FOUR_FREE,
        jobs=[job("ns/k", ("a", None), 1, 4, grow_only=True)],
    ),
    Case(
        "a Kueue job is never shrunk, not even far above the target: Kueue preempts",
        used={"a": 0, "b": 0, "c": 8, "d": 8},
        jobs=[job("ns/k", ("a", "b"), 1, 4, grow_only=True)],
        max_load=0.25,
    ),
    Case(
        "bounds: a job at maxNodes does not grow",
        used=FOUR_FREE,
        jobs=[job("ns/e", ("a", "b"), 1, 2)],
    ),
    Case(
        "bounds: a job at minNodes does not shrink, even far above the target",
        used={"a": 0, "b": 8, "c": 8, "d": 8},
        jobs=[job("ns/e", ("a",), 1, 4)],
        max_load=0.5,
    ),
    Case(
        "load above the target: the most-fulfilled job gives back a node",
        used={"a": 0, "b": 0, "c": 0, "d": 8},
        jobs=[job("ns/x", ("a", "b"), 1, 4), job("ns/y", ("c",), 1, 2)],
        max_load=0.9,
        expect=[("ns/x", 2, 1, AutoscalerReason.LOAD_ABOVE_TARGET)],
    ),
    Case(
        "pending rigid work that finds no room: the most-fulfilled job shrinks, one node",
        used={"a": 0, "b": 0, "c": 0, "d": 8},
        jobs=[job("ns/e", ("a", "b", "c"), 1, 4)],
        pending=[PendingPod(shape(8), forcing=True, owner="ns/rigid")],
        expect=[("ns/e", 3, 2, AutoscalerReason.PENDING_WORK)],
    ),
    Case(
        "pending rigid work of two pods: two jobs each give a node in one pass",
        used={"a": 0, "b": 0, "c": 0, "d": 0},
        jobs=[job("ns/x", ("a", "b"), 1, 2), job("ns/y", ("c", "d"), 1, 4)],
        pending=[PendingPod(shape(8), True, "ns/rigid"), PendingPod(shape(8), True, "ns/rigid")],
        expect=[("ns/x", 2, 1, AutoscalerReason.PENDING_WORK), ("ns/y", 2, 1, AutoscalerReason.PENDING_WORK)],
    ),
    Case(
        "pending rigid work: a shrink that makes room at once beats a more fulfilled one that would not",
        used={"a": 0, "b": 4, "c": 0},
        jobs=[job("ns/x", ("a", "b"), 1, 2, pod=shape(4)), job("ns/y", ("a", "c"), 1, 4, pod=shape(4))],
        pending=[PendingPod(shape(8), True, "ns/rigid")],
        expect=[("ns/y", 2, 1, AutoscalerReason.PENDING_WORK)],
    ),
    Case(
        "pending rigid work that fits already: its room is kept, nothing grows into it",
        used={"a": 0, "b": 0, "c": 8, "d": 8},
        jobs=[job("ns/e", ("a",), 1, 4)],
        pending=[PendingPod(shape(8), True, "ns/rigid")],
    ),
    Case(
        "any pod waiting for a node keeps its room from being grown into",
        used={"a": 0, "b": 0, "c": 8, "d": 8},
        jobs=[job("ns/e", ("a",), 1, 4)],
        pending=[PendingPod(shape(8), False, "ns/other")],
    ),
    Case(
        "but only rigid work waiting as Unschedulable makes jobs shrink",
        used={"a": 0, "b": 0, "c": 8, "d": 8},
        jobs=[job("ns/e", ("a", "b"), 1, 4)],
        pending=[PendingPod(shape(8), False, "ns/other")],
    ),
    Case(
        "pending work that no node could ever hold neither shrinks jobs nor stops growth",
        used={"a": 0, "b": 0, "c": 8, "d": 8},
        jobs=[job("ns/e", ("a",), 1, 4)],
        pending=[PendingPod(shape(16), True, "ns/huge")],
        expect=[("ns/e", 1, 2, AutoscalerReason.FREE_CAPACITY)],
    ),
    Case(
        "a job whose own pods cannot be scheduled gives back a node and does not grow",
        used={"a": 0, "b": 8, "c": 8, "d": 8},
        jobs=[job("ns/e", ("a", None), 1, 4, waiting=True)],
        expect=[("ns/e", 2, 1, AutoscalerReason.OWN_PODS_UNSCHEDULABLE)],
    ),
    Case(
        "a waiting job at its minimum is left as it is",
        used={"a": 8, "b": 8, "c": 8, "d": 0},
        jobs=[job("ns/e", (None,), 1, 4, waiting=True)],
    ),
    Case(
        "a node whose taint the pods do not tolerate is no room",
        used={"a": 0, "b": 0},
        jobs=[job("ns/e", ("a",), 1, 4)],
        taints={"b": (Taint("gpu", "reserved", "NoSchedule"),)},
    ),
    Case(
        "tolerated taints and a matching nodeSelector are room",
        used={"a": 0, "b": 0, "c": 0},
        jobs=[
            job(
                "ns/e",
                ("a",),
                1,
                4,
                pod=shape(8, node_selector={"pool": "train"}, tolerations=(Toleration("gpu", "Exists"),)),
            )
        ],
        taints={"b": (Taint("gpu", "reserved", "NoSchedule"),)},
        labels={"a": {"pool": "train"}, "b": {"pool": "train"}, "c": {"pool": "infer"}},
        expect=[("ns/e", 1, 2, AutoscalerReason.FREE_CAPACITY)],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan(case: Case) -> None:
    changes = plan(snapshot(case), case.max_load)

    assert [(c.key, c.from_nodes, c.to_nodes, c.reason) for c in changes] == case.expect


def test_a_grow_reports_the_load_before_and_after_and_the_node() -> None:
    case = Case("", used={"a": 8, "b": 8, "c": 0, "d": 0}, jobs=[job("ns/e", ("c",), 1, 4)])

    (change,) = plan(snapshot(case), 1.0)

    assert (change.load_before, change.load_after) == (0.75, 1.0)
    assert (change.node, change.direction) == ("d", "up")


def test_the_default_target_leaves_the_last_node_of_a_small_cluster_free() -> None:
    # 4 × 8 GPUs, 0.97: 24 → 32 GPUs would be a load of 1.0 > 0.97
    case = Case("", used={"a": 8, "b": 8, "c": 0, "d": 0}, jobs=[job("ns/e", ("c",), 1, 4)])

    assert plan(snapshot(case), 0.97) == []
    assert cluster_load(snapshot(case)) == {GPU: 0.75}


def test_a_shrink_frees_the_node_of_the_highest_rank() -> None:
    case = Case(
        "",
        used={"a": 0, "b": 0, "c": 0, "d": 8},
        jobs=[job("ns/e", ("a", "b", "c"), 1, 4)],
        pending=[PendingPod(shape(8), True, "ns/rigid")],
    )

    (change,) = plan(snapshot(case), 1.0)

    assert change.node == "c"
    assert change.direction == "down"
    assert (change.load_before, change.load_after) == (1.0, 0.75)


def test_load_is_per_gpu_resource() -> None:
    nodes = (
        Node("n", {GPU: 8}, {GPU: 2}),
        Node("amd", {"amd.com/gpu": 4}, {"amd.com/gpu": 4}),
    )
    snap = ClusterSnapshot(nodes, (), (), frozenset({GPU, "amd.com/gpu"}))

    assert cluster_load(snap) == {GPU: 0.75, "amd.com/gpu": 0.0}
