"""The autoscaler's snapshot from cached objects: which jobs it may resize, their size and pods,
what is free where, which pods wait; and the reconciler's side, the size a worker Job runs at."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import JobTopology, TorchrunJob
from controller.autoscaler.resources import pod_requests
from controller.autoscaler.snapshot import build_snapshot, elastic_candidate, queue_settings
from controller.torchrunjob.elastic import desired_nodes

GPU = "nvidia.com/gpu"


def node(name: str, gpus: int = 8, ready: bool = True, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"pool": "gpu"}},
        "spec": spec,
        "status": {
            "allocatable": {GPU: str(gpus), "cpu": "96", "memory": "1Ti"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def queue(name: str = "q", scheduler: str = "default", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"scheduling": {"scheduler": scheduler}, **spec}}


def tjob(
    name: str,
    *,
    running: tuple[str, str] = ("True", "AllWorkersRunning"),
    elastic: tuple[int, int] | None = (1, 4),
    max_restarts: int = 1,
    queue_name: str = "q",
    **status: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "jobQueue": queue_name,
        "numNodes": 2,
        "distributed": {"maxRestarts": max_restarts},
    }
    if elastic:
        spec["elastic"] = {"minNodes": elastic[0], "maxNodes": elastic[1]}
    conditions = [{"type": "Running", "status": running[0], "reason": running[1]}]
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
        "status": {"conditions": conditions, "nodes": 2, **status},
    }


def pod(
    job: str, index: int, node_name: str | None, gpus: int = 8, phase: str = "Running", **meta: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job}-{index}-x",
            "namespace": "ns",
            "labels": {"torchrun-job-name": job, "torchrun.ai/role": "worker"},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            **meta,
        },
        "spec": {
            **({"nodeName": node_name} if node_name else {}),
            "containers": [{"resources": {"requests": {GPU: str(gpus), "cpu": "90"}}}],
        },
        "status": {"phase": phase},
    }


NODES = [node("a"), node("b"), node("c"), node("d")]


def test_a_running_elastic_job_with_its_pods_and_the_free_room() -> None:
    snap = build_snapshot(NODES, [pod("e", 0, "a"), pod("e", 1, "b")], [tjob("e")], [queue()])

    (job,) = snap.jobs
    assert (job.key, job.nodes, job.min_nodes, job.max_nodes) == ("ns/e", 2, 1, 4)
    assert job.placement == ("a", "b") and not job.waiting
    assert job.pod.requests == {GPU: 8, "cpu": 90_000}
    assert {n.name: n.free[GPU] for n in snap.nodes} == {"a": 0, "b": 0, "c": 8, "d": 8}
    assert snap.pending == ()


@pytest.mark.parametrize(
    ("why", "job", "q"),
    [
        ("not elastic", tjob("e", elastic=None), queue()),
        ("minNodes == maxNodes", tjob("e", elastic=(2, 2)), queue()),
        ("no torchrun restart to spend on a node leaving", tjob("e", max_restarts=0), queue()),
        ("Kueue admits against its quota", tjob("e"), queue(scheduler="kueue")),
        ("KAI admits against its quota", tjob("e"), queue(scheduler="kai-scheduler")),
        (
            "a Kueue workload slice not admitted yet: the job waits for it",
            tjob("e", running=("False", "WaitingForAdmission")),
            queue(scheduler="kueue", kueueWorkloadSlices=True),
        ),
        (
            "a Kueue job cannot be placed: Kueue's to settle, never a shrink of ours",
            tjob("e", running=("False", "Unschedulable")),
            queue(scheduler="kueue", kueueWorkloadSlices=True),
        ),
        ("restarting", tjob("e", running=("False", "Restarting")), queue()),
        ("starting", tjob("e", running=("False", "WorkersStarting")), queue()),
        ("suspended", tjob("e", running=("False", "Suspended")), queue()),
        ("queue missing", tjob("e", queue_name="gone"), queue()),
    ],
)
def test_jobs_the_autoscaler_leaves_alone(why: str, job: dict[str, Any], q: dict[str, Any]) -> None:
    snap = build_snapshot(NODES, [pod("e", 0, "a"), pod("e", 1, "b")], [job], [q])

    assert snap.jobs == (), why


def test_a_kueue_queue_with_workload_slices_lets_its_jobs_grow_only() -> None:
    sliced = queue(scheduler="kueue", kueueWorkloadSlices=True)
    snap = build_snapshot(NODES, [pod("e", 0, "a"), pod("e", 1, "b")], [tjob("e")], [sliced])

    (job,) = snap.jobs
    assert job.grow_only and job.placement == ("a", "b")
    plain = build_snapshot(NODES, [pod("e", 0, "a")], [tjob("e")], [queue()])
    assert not plain.jobs[0].grow_only


def test_a_finished_job_is_left_alone() -> None:
    job = tjob("e")
    job["status"]["conditions"].append({"type": "Succeeded", "status": "True", "reason": "Succeeded"})

    assert build_snapshot(NODES, [pod("e", 0, "a")], [job], [queue()]).jobs == ()


def test_the_size_is_desired_nodes_and_higher_ranks_are_leaving() -> None:
    pods = [pod("e", 0, "a"), pod("e", 1, "b"), pod("e", 2, "c")]

    snap = build_snapshot(NODES, pods, [tjob("e", desiredNodes=2)], [queue()])

    assert snap.jobs[0].placement == ("a", "b")
    assert {n.name: n.free[GPU] for n in snap.nodes}["c"] == 8, "rank 2 is leaving: its room counts as free"


def test_a_grow_in_flight_keeps_its_room() -> None:
    snap = build_snapshot(NODES, [pod("e", 0, "a")], [tjob("e", desiredNodes=2)], [queue()])

    assert snap.jobs[0].placement == ("a", None)
    assert [(p.owner, p.forcing) for p in snap.pending] == [("ns/e", False)]


def test_a_waiting_job_is_waiting_and_rigid_work_waiting_is_forcing() -> None:
    jobs = [
        tjob("e", running=("False", "Unschedulable")),
        tjob("rigid", elastic=None, running=("False", "Unschedulable")),
    ]
    pods = [pod("e", 0, "a"), pod("e", 1, None), pod("rigid", 0, None), pod("rigid", 1, "c")]

    snap = build_snapshot(NODES, pods, jobs, [queue()])

    (job,) = snap.jobs
    assert job.waiting and job.placement == ("a", None)
    assert [(p.owner, p.forcing) for p in snap.pending] == [("ns/rigid", True)]


def test_finished_and_terminating_pods_hold_no_room_and_cordoned_or_unready_nodes_are_no_room() -> None:
    nodes = [node("a"), node("b", unschedulable=True), node("c", ready=False), node("d")]
    pods = [
        pod("x", 0, "a", phase="Succeeded"),
        pod("y", 0, "d", deletionTimestamp="2026-01-01T00:00:00Z"),
        pod("z", 0, "d", gpus=2),
    ]

    snap = build_snapshot(nodes, pods, [], [queue()])

    assert {n.name: n.free[GPU] for n in snap.nodes} == {"a": 8, "d": 6}


def test_pod_requests_are_the_schedulers() -> None:
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "500m", GPU: "4"}}}, {"resources": {}}],
        "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
        "overhead": {"cpu": "100m"},
    }

    assert pod_requests({"spec": spec}) == {"cpu": 2100, GPU: 4, "memory": 1024**3}


def _elastic_job(desired: int | None) -> TorchrunJob:
    return TorchrunJob.from_json(
        {
            "metadata": {"name": "e", "namespace": "ns"},
            "spec": {
                "jobQueue": "q",
                "command": "python t.py",
                "numNodes": 2,
                "elastic": {"minNodes": 1, "maxNodes": 4},
            },
            "status": {"desiredNodes": desired} if desired else {},
        }
    )


@pytest.mark.parametrize(("desired", "size"), [(None, 2), (3, 3), (4, 4), (9, 4)])
def test_the_worker_job_runs_desired_nodes_within_the_bounds(desired: int | None, size: int) -> None:
    topo = JobTopology(2, 8, 1, 4, elastic=True)

    assert desired_nodes(_elastic_job(desired), topo) == size


def test_a_rigid_job_keeps_its_size() -> None:
    assert desired_nodes(_elastic_job(3), JobTopology(2, 8, 2, 2)) == 2


def test_the_autoscaler_has_work_only_while_a_job_it_may_resize_exists() -> None:
    """Its cluster-wide node and pod caches start with the first such job (autoscaler.has_work)."""
    queues = queue_settings([queue("q"), queue("kai", scheduler="kai-scheduler")])
    assert elastic_candidate(tjob("a"), queues)
    assert elastic_candidate(tjob("w", running=("False", "WorkersStarting")), queues)  # state is the pass's
    assert not elastic_candidate(tjob("b", elastic=None), queues)
    assert not elastic_candidate(tjob("c", elastic=(2, 2)), queues)
    assert not elastic_candidate(tjob("d", max_restarts=0), queues)
    assert not elastic_candidate(tjob("e", queue_name="missing"), queues)
    assert not elastic_candidate(tjob("k", queue_name="kai"), queues)  # its scheduler resizes
    kueue = queue_settings(
        [queue("kq", scheduler="kueue"), queue("ks", scheduler="kueue", kueueWorkloadSlices=True)]
    )
    assert not elastic_candidate(tjob("p", queue_name="kq"), kueue)  # Kueue would not admit a growth
    assert elastic_candidate(tjob("s", queue_name="ks"), kueue)
    done = tjob("f")
    done["status"]["conditions"].append({"type": "Succeeded", "status": "True"})
    assert not elastic_candidate(done, queues)
