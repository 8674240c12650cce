"""Properties of the planner on random clusters (hypothesis): a plan never takes a job outside its
bounds, moves a job at most one node, never grows past the load target or into a node without
the room, and passes applied one after another reach a fixed point (an empty plan)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.autoscaler.model import ClusterSnapshot, ElasticJob, Node, PendingPod, PodShape, Resize
from controller.autoscaler.placement import FreeCapacity
from controller.autoscaler.planner import cluster_load, plan

GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class World:
    snapshot: ClusterSnapshot
    max_load: float


@st.composite
def worlds(draw: st.DrawFn) -> World:
    node_count = draw(st.integers(1, 8))
    capacity = [draw(st.sampled_from((4, 8))) for _ in range(node_count)]
    rigid = [draw(st.integers(0, c)) for c in capacity]
    nodes = [
        Node(f"n{i}", {GPU: c}, {GPU: c - r}) for i, (c, r) in enumerate(zip(capacity, rigid, strict=True))
    ]
    free = FreeCapacity(nodes, {GPU})
    jobs = []
    for j in range(draw(st.integers(0, 6))):
        low = draw(st.integers(1, 3))
        high = draw(st.integers(low + 1, 6))
        size = draw(st.integers(low, high))
        pod = PodShape({GPU: draw(st.sampled_from((1, 2, 4, 8)))})
        placement: list[str | None] = []
        for _ in range(size):
            node = free.best_fit(pod)
            if node is not None:
                free.take(node, pod.requests)
            placement.append(node)
        jobs.append(ElasticJob(f"ns/j{j}", low, high, pod, GPU, tuple(placement), None in placement))
    pending = tuple(
        PendingPod(PodShape({GPU: draw(st.sampled_from((1, 4, 8, 16)))}), draw(st.booleans()))
        for _ in range(draw(st.integers(0, 3)))
    )
    taken = tuple(Node(n.name, n.allocatable, dict(free.free[n.name])) for n in nodes)
    snapshot = ClusterSnapshot(taken, tuple(jobs), pending, frozenset({GPU}))
    return World(snapshot, draw(st.sampled_from((0.5, 0.75, 0.9, 0.97, 1.0))))


def apply(snapshot: ClusterSnapshot, changes: list[Resize]) -> ClusterSnapshot:
    """What the cluster looks like once the plan's pods are placed and removed as planned."""
    free = {n.name: dict(n.free) for n in snapshot.nodes}
    by_key = {c.key: c for c in changes}
    jobs = []
    for job in snapshot.jobs:
        change = by_key.get(job.key)
        placement = job.placement
        if change is not None and change.direction == "up":
            assert change.node is not None
            free[change.node][GPU] -= job.gpus_per_node
            placement = (*placement, change.node)
        elif change is not None:
            if placement[-1] is not None:
                free[placement[-1]][GPU] += job.gpus_per_node
            placement = placement[:-1]
        jobs.append(replace(job, placement=placement, waiting=None in placement))
    nodes = tuple(replace(n, free=free[n.name]) for n in snapshot.nodes)
    return replace(snapshot, nodes=nodes, jobs=tuple(jobs))


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_a_plan_keeps_bounds_load_and_room(world: World) -> None:
    snapshot = world.snapshot
    before = cluster_load(snapshot).get(GPU, 0.0)
    changes = plan(snapshot, world.max_load)
    jobs = {j.key: j for j in snapshot.jobs}

    assert len({c.key for c in changes}) == len(changes), "one step per job per pass"
    for c in changes:
        job = jobs[c.key]
        assert abs(c.to_nodes - c.from_nodes) == 1 and c.from_nodes == job.nodes
        assert job.min_nodes <= c.to_nodes <= job.max_nodes
        if c.direction == "up":
            assert c.load_after <= world.max_load + 1e-9
    after = apply(snapshot, changes)
    assert all(n.free[GPU] >= 0 for n in after.nodes), "a grow only goes where the room is"
    assert cluster_load(after).get(GPU, 0.0) <= max(before, world.max_load) + 1e-9


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_repeated_passes_reach_a_fixed_point(world: World) -> None:
    snapshot = world.snapshot
    steps = sum(j.max_nodes - j.min_nodes for j in snapshot.jobs)
    for _ in range(2 * steps + 2):
        changes = plan(snapshot, world.max_load)
        if not changes:
            break
        snapshot = apply(snapshot, changes)
    assert plan(snapshot, world.max_load) == [], "the plan must settle"
    for job in snapshot.jobs:
        assert job.min_nodes <= job.nodes <= job.max_nodes
