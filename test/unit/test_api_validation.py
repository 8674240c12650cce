"""What only the controller can judge: topology from numGPUs, overrides, storage, limits, command."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import (
    InvalidObjectError,
    Quantity,
    TorchrunJob,
    TorchrunQueue,
    resolve_topology,
    validate_job,
    validate_job_spec,
    validate_queue,
)


def make_queue(name: str = "q", **spec: Any) -> TorchrunQueue:
    base: dict[str, Any] = {"nodeResources": {"gpus": 8}, "image": "pytorch"}
    return TorchrunQueue.from_json({"metadata": {"name": name}, "spec": {**base, **spec}})


def make_job(**spec: Any) -> TorchrunJob:
    base: dict[str, Any] = {"jobQueue": "q", "command": "python train.py"}
    if "numGPUs" not in spec and "numNodes" not in spec:
        base["numNodes"] = 1
    return TorchrunJob.from_json({"metadata": {"name": "j", "namespace": "ns"}, "spec": {**base, **spec}})


@pytest.mark.parametrize(
    ("job_spec", "gpus_per_node", "nodes", "per_node", "nnodes", "world"),
    [
        ({"numNodes": 4}, 8, 4, 8, "4", 32),
        ({"numGPUs": 4}, 8, 1, 4, "1", 4),
        ({"numGPUs": 8}, 8, 1, 8, "1", 8),
        ({"numGPUs": 32}, 8, 4, 8, "4", 32),
        ({"numGPUs": 1}, 4, 1, 1, "1", 1),
        ({"numNodes": 3}, 0, 3, 0, "3", 3),
        ({"numNodes": 2, "elastic": {"minNodes": 1, "maxNodes": 4}}, 8, 2, 8, "1:4", 16),
    ],
)
def test_topology(
    job_spec: dict[str, Any], gpus_per_node: int, nodes: int, per_node: int, nnodes: str, world: int
) -> None:
    topology = resolve_topology(
        make_job(**job_spec).spec, make_queue(nodeResources={"gpus": gpus_per_node}).spec.node_resources
    )
    assert (topology.nodes, topology.gpus_per_node, topology.nnodes, topology.world_size) == (
        nodes,
        per_node,
        nnodes,
        world,
    )


def test_storage_is_sized_for_the_largest_job() -> None:
    node = make_queue().spec.node_resources
    elastic = resolve_topology(make_job(numNodes=1, elastic={"minNodes": 1, "maxNodes": 4}).spec, node)
    assert str(elastic.storage_size(Quantity.parse("10Gi"))) == "320Gi"
    cpu_only = resolve_topology(
        make_job(numNodes=2).spec, make_queue(nodeResources={"gpus": 0}).spec.node_resources
    )
    assert str(cpu_only.storage_size(Quantity.parse("10Gi"))) == "20Gi"


def test_numgpus_that_do_not_divide_name_the_field() -> None:
    with pytest.raises(InvalidObjectError) as info:
        resolve_topology(make_job(numGPUs=12).spec, make_queue().spec.node_resources)
    assert str(info.value.errors[0]) == (
        "spec.numGPUs: 12 GPUs do not divide into nodes of 8 GPUs; torchrun needs the same number of "
        "processes on every node (use 8 or 16 GPUs, or numNodes)"
    )


@pytest.mark.parametrize(
    ("queue_spec", "job_spec", "path", "fragment"),
    [
        ({}, {"numGPUs": 12}, "spec.numGPUs", "12 GPUs do not divide into nodes of 8 GPUs"),
        ({}, {"numGPUs": 9}, "spec.numGPUs", "use 8 or 16 GPUs"),
        ({"nodeResources": {"gpus": 0}}, {"numGPUs": 2}, "spec.numGPUs", "have no GPUs"),
        (
            {},
            {"overrides": {"image": "mine"}},
            "spec.overrides.image",
            'queue "q" does not allow overriding image',
        ),
        (
            {"allowOverrides": ["env"]},
            {"overrides": {"env": [{"name": "A", "value": "1"}], "tolerations": [{"operator": "Exists"}]}},
            "spec.overrides.tolerations",
            "(its allowOverrides: env)",
        ),
        (
            {"allowOverrides": ["image"]},
            {"overrides": {"workingDir": "/w"}},
            "spec.overrides.workingDir",
            "workingDir",
        ),
        (
            {},
            {"overrides": {"nodeSelector": {"a": "b"}}},
            "spec.overrides.nodeSelector",
            "allowOverrides: nothing",
        ),
        (
            {},
            {"overrides": {"priorityClassName": "high"}},
            "spec.overrides.priorityClassName",
            "priorityClassName",
        ),
        (
            {"storage": {"workspace": {"enabled": False}}},
            {"workspace": {"source": "git", "git": {"url": "https://x/y.git"}}},
            "spec.workspace.source",
            "source git needs a workspace volume",
        ),
        (
            {"storage": {"workspace": {"enabled": False}}},
            {},
            "spec.workspace.source",
            "source upload needs a workspace volume",
        ),
        (
            {"storage": {"workspace": {"enabled": False}}},
            {"workspace": {"source": "pvc", "pvc": {"claimName": "c"}}},
            "spec.workspace.source",
            "source pvc needs a workspace volume",
        ),
        (
            {"storage": {"workspace": {"enabled": False}}},
            {"volumes": {"workspace": {"enabled": True, "source": "zip"}}},
            "spec.volumes.workspace.source",
            "source upload needs a workspace volume",
        ),
        (
            {"scheduling": {"scheduler": "kai-scheduler"}, "quota": {"gpu": {"limit": 16}}},
            {"numNodes": 3},
            "spec.numNodes",
            'the job needs 24 GPUs but queue "q" may use at most 16',
        ),
        (
            {"scheduling": {"scheduler": "kai-scheduler"}, "quota": {"gpu": {"limit": 8}}},
            {"numGPUs": 16},
            "spec.numGPUs",
            "needs 16 GPUs",
        ),
        (
            {"scheduling": {"scheduler": "kai-scheduler"}, "quota": {"gpu": {"limit": 8}}},
            {"numNodes": 2, "elastic": {"minNodes": 2, "maxNodes": 4}},
            "spec.elastic.minNodes",
            "needs 16 GPUs",
        ),
        (
            {},
            {"command": "python train.py --name 'unterminated"},
            "spec.command",
            "cannot be split like a shell",
        ),
        ({}, {"command": "   "}, "spec.command", "is empty"),
    ],
)
def test_job_errors_name_the_field(
    queue_spec: dict[str, Any], job_spec: dict[str, Any], path: str, fragment: str
) -> None:
    errors = validate_job(make_job(**job_spec), make_queue(**queue_spec))
    assert [e.path for e in errors] == [path], errors
    assert fragment in errors[0].message
    assert str(errors[0]).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("queue_spec", "job_spec"),
    [
        ({}, {"numNodes": 4}),
        ({}, {"numGPUs": 4}),
        ({}, {"numGPUs": 64}),
        ({"allowOverrides": ["image", "env"]}, {"overrides": {"image": "x", "env": [{"name": "A"}]}}),
        ({"storage": {"workspace": {"enabled": False}}}, {"workspace": {"source": "none"}}),
        ({"scheduling": {"scheduler": "kai-scheduler"}, "quota": {"gpu": {"limit": 16}}}, {"numNodes": 2}),
        ({}, {"command": "python -m pkg.train --name 'my run' --tags \"a b\""}),
    ],
)
def test_valid_jobs_have_no_errors(queue_spec: dict[str, Any], job_spec: dict[str, Any]) -> None:
    assert validate_job(make_job(**job_spec), make_queue(**queue_spec)) == []


@pytest.mark.parametrize(
    ("queue_spec", "path", "fragment"),
    [
        (
            {"nodeResources": {"gpus": 8, "memory": "64Gi"}, "storage": {"shmSizePerGPU": "16Gi"}},
            "spec.storage.shmSizePerGPU",
            "8 GPUs × 16Gi = 128Gi of /dev/shm does not fit in nodeResources.memory 64Gi",
        ),
        (
            {"nodeResources": {"gpus": 8, "memory": "8Gi"}},
            "spec.storage.shmSizePerGPU",
            "16Gi of /dev/shm",
        ),
        (
            {"storage": {"workspace": {"sizePerGPU": 0}}},
            "spec.storage.workspace.sizePerGPU",
            "greater than zero",
        ),
        (
            {"storage": {"checkpoints": {"enabled": True, "sizePerGPU": "0Gi"}}},
            "spec.storage.checkpoints.sizePerGPU",
            "greater than zero",
        ),
    ],
)
def test_queue_errors_name_the_field(queue_spec: dict[str, Any], path: str, fragment: str) -> None:
    errors = validate_queue(make_queue(**queue_spec))
    assert [e.path for e in errors] == [path]
    assert fragment in errors[0].message


def test_valid_queues_have_no_errors() -> None:
    assert validate_queue(make_queue()) == []
    assert validate_queue(make_queue(nodeResources={"gpus": 0, "memory": "1Gi"})) == []
    assert validate_queue(make_queue(storage={"checkpoints": {"sizePerGPU": 0}})) == []  # disabled
    assert validate_job_spec(make_job().spec) == []
