"""One autoscaler planning pass over a large cluster, in milliseconds.

    python hack/bench/bench_autoscaler.py [--nodes 1000] [--jobs 500] [--repeat 20]

The cluster is synthetic (no control plane): `--nodes` nodes of 8 GPUs, `--jobs` elastic jobs
(minNodes 1, maxNodes 8, 4 or 8 GPUs per node, 1 or 2 nodes to start) and rigid pods filling part
of the rest, as cached objects. Each scenario times `build_snapshot` (cached objects → snapshot)
and `plan` (snapshot → changes) separately; the pass the autoscaler runs is their sum plus the
writes. Scenarios: room to grow (load ≈ 0.6), load above the target (shrink), rigid work
waiting (forced shrink), full cluster (nothing to do). Median and p95 of `--repeat` runs.
Never a test.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from common import percentile, table

from controller.autoscaler.planner import cluster_load, plan
from controller.autoscaler.snapshot import build_snapshot

GPU = "nvidia.com/gpu"
Obj = dict[str, Any]


def node(i: int) -> Obj:
    return {
        "metadata": {"name": f"gpu-{i:05d}", "labels": {"pool": "train"}},
        "spec": {},
        "status": {
            "allocatable": {GPU: "8", "cpu": "96", "memory": "1Ti"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(ns: str, job: str, index: int, node_name: str | None, gpus: int, worker: bool = True) -> Obj:
    labels = {"torchrun-job-name": job, "torchrun.ai/role": "worker"} if worker else {"app": job}
    return {
        "metadata": {
            "name": f"{job}-{index}",
            "namespace": ns,
            "labels": labels,
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": {
            **({"nodeName": node_name} if node_name else {}),
            "containers": [{"resources": {"requests": {GPU: str(gpus), "cpu": "10", "memory": "100Gi"}}}],
        },
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def tjob(
    name: str, size: int, running: str = "True", reason: str = "AllWorkersRunning", elastic: bool = True
) -> Obj:
    spec: Obj = {"jobQueue": "q", "numNodes": size, "distributed": {"maxRestarts": 3}}
    if elastic:
        spec["elastic"] = {"minNodes": 1, "maxNodes": 8}
    return {
        "metadata": {"name": name, "namespace": "bench", "resourceVersion": "1"},
        "spec": spec,
        "status": {"nodes": size, "conditions": [{"type": "Running", "status": running, "reason": reason}]},
    }


def cluster(nodes: int, jobs: int, fill: float, rigid_waiting: int, seed: int = 1) -> tuple[list[Obj], ...]:
    """Cached objects: nodes, pods, TorchrunJobs, queues. Elastic pods then rigid pods are packed
    onto nodes until `fill` of the GPUs are requested."""
    rng = random.Random(seed)
    node_objs = [node(i) for i in range(nodes)]
    free = [8] * nodes
    budget = int(fill * 8 * nodes)
    pods: list[Obj] = []
    job_objs: list[Obj] = []
    cursor = 0

    def place(gpus: int) -> str | None:
        nonlocal cursor
        for step in range(nodes):
            i = (cursor + step) % nodes
            if free[i] >= gpus:
                free[i] -= gpus
                cursor = i
                return str(node_objs[i]["metadata"]["name"])
        return None

    for j in range(jobs):
        gpus, size = rng.choice((4, 8)), rng.randint(1, 2)
        name = f"elastic-{j}"
        job_objs.append(tjob(name, size))
        for index in range(size):
            pods.append(pod("bench", name, index, place(gpus), gpus))
            budget -= gpus
    r = 0
    while budget > 0:
        where, gpus = place(8), 8
        if where is None:
            where, gpus = place(4), 4  # fill the gaps the 4-GPU jobs left
        if where is None:
            break
        pods.append(pod("other", f"rigid-{r}", 0, where, gpus, worker=False))
        budget -= gpus
        r += 1
    for w in range(rigid_waiting):
        name = f"waiting-{w}"
        job_objs.append(tjob(name, 1, "False", "Unschedulable", elastic=False))
        pods.append(pod("bench", name, 0, None, 8))
    queues = [{"metadata": {"name": "q"}, "spec": {}}]
    return node_objs, pods, job_objs, queues


def measure(objects: tuple[list[Obj], ...], max_load: float, repeat: int) -> list[object]:
    snap_ms, plan_ms = [], []
    changes: list[Any] = []
    for _ in range(repeat):
        start = time.perf_counter()
        snapshot = build_snapshot(*objects)
        mid = time.perf_counter()
        changes = plan(snapshot, max_load)
        end = time.perf_counter()
        snap_ms.append((mid - start) * 1000)
        plan_ms.append((end - mid) * 1000)
    ups = sum(1 for c in changes if c.direction == "up")
    load = cluster_load(snapshot).get(GPU, 0.0)
    return [
        f"{load:.2f}",
        f"{ups} up, {len(changes) - ups} down",
        f"{percentile(snap_ms, 50):.1f} / {percentile(snap_ms, 95):.1f}",
        f"{percentile(plan_ms, 50):.1f} / {percentile(plan_ms, 95):.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    scenarios = [
        ("room to grow", 0.6, 0, 0.97),
        ("load above target", 0.99, 0, 0.9),
        ("rigid work waiting (50 pods)", 1.0, 50, 1.0),
        ("full cluster", 1.0, 0, 1.0),
    ]
    rows = []
    for name, fill, waiting, target in scenarios:
        objects = cluster(args.nodes, args.jobs, fill, waiting)
        pods = len(objects[1])
        rows.append([name, target, pods, *measure(objects, target, args.repeat)])
    headers = ["scenario", "target", "pods", "load", "plan", "snapshot ms p50/p95", "plan ms p50/p95"]
    print(f"{args.nodes} nodes × 8 GPUs, {args.jobs} elastic jobs, {args.repeat} runs each")
    print(table(headers, rows))


if __name__ == "__main__":
    main()
