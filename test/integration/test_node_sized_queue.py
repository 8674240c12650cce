"""A queue sized to the whole node runs (issue 31 item 5): `nodeResources` is what a worker pod asks
for in all, so a queue whose `nodeResources` equal a node's allocatable — as the seed's examples
write them ("cpus: 96 # CPUs per node") — gets its workers scheduled on such nodes, the progress
reporter sidecar and the init containers included (manifests/podresources.py).

The nodes are the test's own kwok nodes (allocatable = capacity), tainted so no other test's pod
takes a share of them, and each worker pod must fill one exactly: before the fix the training
container asked for the whole node and the sidecar's 10m CPU and 48Mi on top, and every worker
stayed Pending, `Unschedulable` ("Insufficient cpu, Insufficient memory").
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobs import condition, make_job, queue_manifest
from testbed import Cluster, wait_until

from controller.api.quantity import Quantity
from controller.cmd.main import App
from controller.torchrunjob.manifests.podresources import effective_requests

ALLOCATABLE = {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}
TAINT = "torchrun-test/node-sized"


def node_manifest(name: str, label: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", TAINT: label},
        },
        "spec": {"taints": [{"key": TAINT, "value": label, "effect": "NoSchedule"}]},
        "status": {"capacity": {**ALLOCATABLE, "pods": "110"}},
    }


@pytest.fixture
def node_pool(cluster: Cluster, namespace: str) -> Iterator[tuple[str, list[str]]]:
    """Two kwok nodes of the test's own: (their label value, their names)."""
    label = uuid.uuid4().hex[:6]
    names = [f"sized-{label}-{i}" for i in range(2)]
    cluster.kubectl("apply", "-f", "-", input="\n".join(json.dumps(node_manifest(n, label)) for n in names))
    cluster.kubectl("wait", "--for=condition=Ready", "--timeout=60s", *(f"node/{n}" for n in names))
    yield label, names
    for kind in ("torchrunjobs", "jobs"):
        cluster.kubectl("delete", kind, "--all", "-n", namespace, "--wait=false")
    cluster.delete_namespace(namespace)
    cluster.kubectl("delete", "node", "--ignore-not-found", "--wait=false", *names)


def test_a_queue_sized_to_the_nodes_allocatable_runs_its_workers(
    cluster: Cluster,
    namespace: str,
    node_pool: tuple[str, list[str]],
    start_controller: Callable[..., App],
) -> None:
    label, nodes = node_pool
    for node in nodes:  # what the queue is sized to: the nodes' allocatable, as the scheduler sees it
        allocatable = cluster.get("node", node)["status"]["allocatable"]
        assert {k: allocatable[k] for k in ALLOCATABLE} == ALLOCATABLE
    queue = f"q-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        queue_manifest(
            queue,
            "run",
            "1h",
            nodeResources={"gpus": 8, "cpus": ALLOCATABLE["cpu"], "memory": ALLOCATABLE["memory"]},
            scheduling={
                "nodeSelector": {TAINT: label},
                "tolerations": [{"key": TAINT, "operator": "Equal", "value": label, "effect": "NoSchedule"}],
            },
        )
    )
    try:
        start_controller()
        make_job(cluster, namespace, queue, "whole")  # 2 nodes
        seen: list[dict[str, Any]] = []

        def all_running() -> dict[str, Any] | None:
            seen[:] = [cluster.get("torchrunjob", "whole", "-n", namespace)]
            c = condition(seen[0], "Running")
            return seen[0] if c and c["status"] == "True" else None

        try:
            running = wait_until(all_running, 90, message="every worker Running on a node sized to the queue")
        except AssertionError as exc:  # say why: the scheduler's words, as the job quotes them
            raise AssertionError(
                f"{exc}; Running: {condition(seen[0], 'Running') if seen else None}"
            ) from exc
        assert condition(running, "Running")["reason"] == "AllWorkersRunning"
        pods = cluster.get("pods", "-n", namespace, "-l", "torchrun-job-name=whole")["items"]
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(nodes), "one worker fills each node"
        for pod in pods:
            assert pod["status"]["phase"] == "Running"
            # what the scheduler counted for it, the sidecar and init containers included: the node
            asked = effective_requests(pod["spec"])
            assert {k: asked[k] for k in ALLOCATABLE} == {
                k: Quantity.parse(v) for k, v in ALLOCATABLE.items()
            }
    finally:
        cluster.kubectl("delete", "torchrunqueue", queue, "--ignore-not-found", "--wait=false", check=False)
