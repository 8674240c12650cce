"""A worker pod asks for its queue's `nodeResources` in all (manifests/podresources.py): what the
controller adds — init containers, the progress reporter sidecar — comes out of the training
container's share, the GPUs stay with it, and a queue that leaves it nothing is refused."""

from __future__ import annotations

from typing import Any

import pytest
from jobspecs import job, queue, worker

from controller.api import validate_queue
from controller.api.quantity import Quantity
from controller.api.torchrunqueue import RESERVED_PER_WORKER_POD
from controller.torchrunjob.manifests.podresources import (
    effective_requests,
    reserved,
    share_node,
    training_share,
)
from controller.torchrunjob.manifests.worker import CONTAINER


def q(**amounts: str) -> dict[str, Quantity]:
    return {name.replace("_", "."): Quantity.parse(v) for name, v in amounts.items()}


def box(
    name: str, requests: dict[str, str], limits: dict[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    resources = {"requests": requests, **({"limits": limits} if limits is not None else {})}
    return {"name": name, "resources": resources, **kw}


def pod_of(m: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = m["spec"]["template"]["spec"]
    return spec


def test_effective_request_counts_sidecars_beside_the_app_containers_and_before_later_inits() -> None:
    """Kubernetes' rule (KEP-753): max(each init + the sidecars started before it, the app
    containers + every sidecar)."""
    pod = {
        "initContainers": [
            box("init-a", {"cpu": "2", "memory": "1Gi"}),
            box("side", {"cpu": "500m", "memory": "1Gi"}, restartPolicy="Always"),
            box("init-b", {"cpu": "3"}),  # runs beside `side`: 3.5 CPUs at its peak
        ],
        "containers": [box("main", {"cpu": "1", "memory": "2Gi"})],
    }
    assert effective_requests(pod) == q(cpu="3500m", memory="3Gi")
    assert reserved(pod, "main") == q(cpu="500m", memory="1Gi")


@pytest.mark.parametrize(
    "node",
    [
        {"gpus": 8, "cpus": "96", "memory": "1Ti"},  # a seed queue sized to an H100 node
        {"gpus": 1, "cpus": "700m", "memory": "1536Mi"},  # the real node's test queue
        {"gpus": 0, "cpus": "4"},  # CPU-only, no memory named
        {"gpus": 0, "cpus": "20m", "memory": "64Mi"},  # smaller than every init container's request
    ],
)
def test_the_worker_pod_asks_for_node_resources_exactly(node: dict[str, str]) -> None:
    for source in ({"source": "none"}, {"source": "upload"}):
        pod = pod_of(worker(job(workspace=source), queue(nodeResources=node)))
        shape = {"cpu": node["cpus"], **({"memory": node["memory"]} if "memory" in node else {})}
        if node["gpus"]:
            shape["nvidia.com/gpu"] = str(node["gpus"])
        asked = effective_requests(pod)  # a resource the queue does not name is not its business
        assert {k: asked[k] for k in shape} == {k: Quantity.parse(v) for k, v in shape.items()}, source
        (training,) = pod["containers"]
        # requests equal limits, as before; every GPU is the training container's
        assert training["resources"]["requests"] == training["resources"]["limits"]
        if node["gpus"]:
            assert training["resources"]["limits"]["nvidia.com/gpu"] == str(node["gpus"])
        for c in [*pod["initContainers"], *pod["containers"]]:
            for kind in ("requests", "limits"):
                for name, amount in (c["resources"].get(kind) or {}).items():
                    if name in shape:  # nobody may use more than the whole pod asks for
                        assert Quantity.parse(amount) <= Quantity.parse(shape[name]), (c["name"], kind)
            requests, limits = c["resources"]["requests"], c["resources"].get("limits") or {}
            assert all(Quantity.parse(v) <= Quantity.parse(limits.get(n, v)) for n, v in requests.items())


def test_the_training_container_gets_the_node_less_the_sidecar() -> None:
    """96 CPUs and 1Ti: 95990m and 1Ti - 48Mi; the sidecar keeps its own request and limit."""
    pod = pod_of(worker(job(), queue()))
    (training,) = pod["containers"]
    assert training["name"] == CONTAINER
    share = {"nvidia.com/gpu": "8", "cpu": "95990m", "memory": "1048528Mi"}
    assert training["resources"] == {"requests": share, "limits": share}
    sidecar = pod["initContainers"][-1]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["resources"] == {
        "requests": {"cpu": "10m", "memory": "48Mi"},
        "limits": {"cpu": "500m", "memory": "256Mi"},
    }


def test_what_the_queue_reserves_is_what_the_built_pod_adds_beside_the_training_container() -> None:
    """The queue's refusal (`RESERVED_PER_WORKER_POD`) and the builder cannot drift: whatever the
    controller runs beside the training container is exactly what the queue check reserves."""
    want = {k: Quantity.parse(v) for k, v in RESERVED_PER_WORKER_POD.items()}
    for q_spec in ({}, {"debug": {"stackDumps": True}}, {"storage": {"checkpoints": {"enabled": True}}}):
        for source in ("none", "upload"):
            pod = pod_of(worker(job(workspace={"source": source}), queue(**q_spec)))
            assert reserved(pod, CONTAINER) == want, (q_spec, source)


def test_init_containers_and_sidecars_are_capped_to_what_they_can_have() -> None:
    pod = {
        "initContainers": [
            box("copy", {"cpu": "100m", "memory": "128Mi"}, {"cpu": "2", "memory": "512Mi"}),
            box("side", {"cpu": "10m"}, {"cpu": "500m"}, restartPolicy="Always"),
            box("late", {"cpu": "300m"}, {"cpu": "1"}),  # beside `side`: at most 290m
        ],
        "containers": [box("main", {}), box("other", {"cpu": "20m"}, {"cpu": "2"})],
    }
    shaped = share_node(pod, q(cpu="300m", memory="256Mi"), "main")
    by_name = {c["name"]: c["resources"] for c in [*shaped["initContainers"], *shaped["containers"]]}
    assert by_name["copy"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "300m", "memory": "256Mi"},
    }
    assert by_name["side"] == {"requests": {"cpu": "10m"}, "limits": {"cpu": "300m"}}
    assert by_name["late"] == {"requests": {"cpu": "290m"}, "limits": {"cpu": "290m"}}
    assert by_name["other"] == {"requests": {"cpu": "20m"}, "limits": {"cpu": "300m"}}
    assert by_name["main"] == {
        "requests": {"cpu": "270m", "memory": "256Mi"},
        "limits": {"cpu": "270m", "memory": "256Mi"},
    }
    assert effective_requests(shaped) == q(cpu="300m", memory="256Mi")
    assert pod["containers"][0] == box("main", {}), "the pod given is not changed"


def test_a_shape_that_leaves_the_training_container_nothing_names_the_field() -> None:
    pod = {
        "initContainers": [box("side", {"cpu": "10m", "memory": "48Mi"}, restartPolicy="Always")],
        "containers": [box("main", {})],
    }
    with pytest.raises(ValueError, match=r"spec\.nodeResources\.cpus: 10m leaves nothing"):
        training_share(pod, q(cpu="10m", memory="1Gi"), "main")
    with pytest.raises(ValueError, match=r"spec\.nodeResources\.memory: 48Mi leaves nothing"):
        training_share(pod, q(cpu="1", memory="48Mi"), "main")
    assert training_share(pod, q(cpu="11m"), "main") == q(cpu="1m")


@pytest.mark.parametrize(
    ("node", "path", "words"),
    [
        (
            {"gpus": 0, "cpus": "10m"},
            "spec.nodeResources.cpus",
            "10m is what each worker pod asks for in all",
        ),
        ({"gpus": 0, "memory": "32Mi"}, "spec.nodeResources.memory", "requests 48Mi"),
    ],
)
def test_a_queue_too_small_for_the_controllers_sidecar_is_refused(
    node: dict[str, Any], path: str, words: str
) -> None:
    (error,) = validate_queue(queue(nodeResources=node))
    assert error.path == path and words in error.message, error
    assert "nothing is left for the training container" in error.message


def test_queues_with_room_for_the_sidecar_pass() -> None:
    for node in ({"gpus": 0, "cpus": "11m", "memory": "49Mi"}, {"gpus": 8}, {"gpus": 8, "cpus": "96"}):
        assert validate_queue(queue(nodeResources=node)) == [], node
