"""Parsing the raw JSON the informers hold into the API types: defaults, aliases, errors, purity."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.api import (
    AccessMode,
    Backend,
    ConditionStatus,
    InvalidObjectError,
    JobOverrides,
    JobPhase,
    Overridable,
    Quantity,
    RdzvBackend,
    Scheduler,
    TorchrunJob,
    TorchrunQueue,
    WorkspaceSource,
    to_json,
)
from controller.api.fields import resolved_fields
from controller.cache import freeze


def queue(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunQueue",
        "metadata": {"name": "q", "generation": 2, "uid": "u-1"},
        "spec": {"nodeResources": {"gpus": 8}, "image": "pytorch", **spec},
    }


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunJob",
        "metadata": {"name": "j", "namespace": "ns", "generation": 1},
        "spec": {"jobQueue": "q", "numNodes": 2, "command": "python train.py", **spec},
    }


def test_minimal_queue_gets_every_default() -> None:
    q = TorchrunQueue.from_json(queue())
    spec = q.spec
    assert spec.node_resources.gpu_resource_name == "nvidia.com/gpu"
    assert spec.node_resources.cpus is None
    assert spec.security_context == {"runAsNonRoot": True}
    assert spec.storage.workspace.enabled
    assert spec.storage.workspace.size_per_gpu == Quantity.parse("10Gi")
    assert spec.storage.workspace.access_modes == (AccessMode.READ_WRITE_MANY,)
    assert not spec.storage.checkpoints.enabled
    assert spec.storage.checkpoints.mount_path == "/checkpoints"
    assert spec.storage.datasets is None
    assert spec.storage.shm_size_per_gpu == Quantity.parse("2Gi")
    assert spec.scheduling.scheduler is Scheduler.DEFAULT
    assert spec.allow_overrides == ()
    assert (q.name, q.kai_queue_name, q.kueue_queue_name) == ("q", "q", "q")
    assert q.status.jobs.total == 0


def test_security_context_keeps_user_keys_and_defaults_non_root() -> None:
    q = TorchrunQueue.from_json(queue(securityContext={"runAsUser": 1000}))
    assert q.spec.security_context == {"runAsUser": 1000, "runAsNonRoot": True}
    root = TorchrunQueue.from_json(queue(securityContext={"runAsNonRoot": False, "runAsUser": 0}))
    assert root.spec.security_context == {"runAsNonRoot": False, "runAsUser": 0}


def test_minimal_job_gets_every_default() -> None:
    j = TorchrunJob.from_json(job())
    spec = j.spec
    assert (spec.num_nodes, spec.num_gpus, spec.elastic, spec.overrides) == (2, None, None, None)
    assert spec.distributed.backend is Backend.NCCL
    assert spec.distributed.rdzv_backend is RdzvBackend.C10D
    assert (spec.distributed.rdzv_port, spec.distributed.max_restarts) == (29400, 0)
    assert not spec.distributed.managed_etcd
    assert spec.workspace.source is WorkspaceSource.UPLOAD
    assert spec.workspace.mount_path == "/app"
    assert not spec.suspend
    assert (spec.failure_policy.max_restarts, spec.failure_policy.backoff_limit_per_node) == (0, 0)
    assert j.status.phase is JobPhase.PENDING
    assert (j.key, j.metadata.generation) == ("ns/j", 1)


def test_zip_is_read_as_upload() -> None:
    j = TorchrunJob.from_json(job(workspace={"source": "zip"}))
    assert j.spec.workspace.source is WorkspaceSource.UPLOAD


@pytest.mark.parametrize(
    ("seed_form", "source"),
    [
        ({"enabled": True, "source": "zip"}, WorkspaceSource.UPLOAD),  # the seed's changes document
        ({"enabled": True}, WorkspaceSource.UPLOAD),
        ({"source": "none"}, WorkspaceSource.NONE),
        ({"enabled": False}, WorkspaceSource.NONE),
    ],
)
def test_the_seeds_volumes_workspace_is_read_as_workspace(
    seed_form: dict[str, Any], source: WorkspaceSource
) -> None:
    j = TorchrunJob.from_json(job(volumes={"workspace": seed_form}))
    assert j.spec.seed_workspace
    assert j.spec.workspace.source is source and j.spec.workspace.mount_path == "/app"
    plain = TorchrunJob.from_json(job(workspace={"source": "none"}, volumes={}))
    assert not plain.spec.seed_workspace and plain.spec.workspace.source is WorkspaceSource.NONE


def test_parse_never_mutates_its_input_and_returns_copies() -> None:
    raw = queue(
        env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        securityContext={"runAsUser": 1000},
        scheduling={"nodeSelector": {"a": "b"}, "affinity": {"nodeAffinity": {"x": [1]}}},
    )
    before = copy.deepcopy(raw)
    q = TorchrunQueue.from_json(raw)
    assert raw == before
    assert q.spec.env[0].value_from is not None
    q.spec.env[0].value_from["secretKeyRef"]["name"] = "changed"  # type: ignore[index]
    q.spec.scheduling.node_selector["a"] = "changed"  # type: ignore[index]
    assert raw == before


def test_null_fields_mean_absent() -> None:
    j = TorchrunJob.from_json(job(elastic=None, distributed=None, overrides=None))
    assert j.spec.elastic is None
    assert j.spec.distributed.rdzv_port == 29400


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (job(jobQueue=5), "spec.jobQueue: must be a string, not integer"),
        (job(numNodes="2"), "spec.numNodes: must be an integer, not string"),
        (job(numNodes=True), "spec.numNodes: must be an integer, not boolean"),
        (job(numNodes=0), "spec.numNodes: must be greater than or equal to 1"),
        ({"spec": {"jobQueue": "q"}}, "spec.command: Required value"),
        ({"metadata": {"name": "x"}}, "spec: Required value"),
        (job(distributed={"backend": "mpi"}), 'spec.distributed.backend: Unsupported value: "mpi"'),
        (job(workspace={"source": "ftp"}), 'spec.workspace.source: Unsupported value: "ftp"'),
        (job(suspend="yes"), "spec.suspend: must be a boolean, not string"),
        (job(elastic={"minNodes": 1}), "spec.elastic.maxNodes: Required value"),
        (
            job(failurePolicy={"permanentExitCodes": [1, 300]}),
            "spec.failurePolicy.permanentExitCodes[1]: must be",
        ),
        (
            job(overrides={"env": [{"name": "A"}, {"value": "x"}]}),
            "spec.overrides.env[1].name: Required value",
        ),
        (job(overrides={"nodeSelector": {"a": 1}}), "spec.overrides.nodeSelector: values must be strings"),
        (job(overrides="image"), "spec.overrides: must be an object, not string"),
        (queue(nodeResources={"gpus": 8, "memory": "lots"}), "spec.nodeResources.memory:"),
        (queue(nodeResources={}), "spec.nodeResources.gpus: Required value"),
        (
            queue(allowOverrides=["image", "resources"]),
            'spec.allowOverrides[1]: Unsupported value: "resources"',
        ),
        (queue(env="A=1"), "spec.env: must be a list, not string"),
        ({**job(), "status": {"startTime": "yesterday"}}, "status.startTime: must be an RFC 3339 timestamp"),
    ],
)
def test_parse_errors_name_the_field(raw: dict[str, Any], message: str) -> None:
    kind = TorchrunQueue if raw.get("kind") == "TorchrunQueue" else TorchrunJob
    with pytest.raises(InvalidObjectError) as info:
        kind.from_json(raw)
    assert message in str(info.value)
    assert info.value.reason == "InvalidSpec"


def test_all_bad_fields_are_reported_at_once() -> None:
    with pytest.raises(InvalidObjectError) as info:
        TorchrunJob.from_json(job(numNodes="x", suspend=1, command=None))
    assert [e.path for e in info.value.errors] == ["spec.command", "spec.numNodes", "spec.suspend"]


def test_status_round_trips_through_json() -> None:
    raw = job()
    raw["status"] = {
        "phase": "Running",
        "observedGeneration": 1,
        "nodes": 2,
        "gpus": 16,
        "restarts": 1,
        "startTime": "2025-01-01T10:00:00Z",
        "workers": {"active": 2, "ready": 2},
        "conditions": [
            {
                "type": "Running",
                "status": "True",
                "reason": "AllNodesReady",
                "message": "2/2 nodes ready",
                "lastTransitionTime": "2025-01-01T10:05:00Z",
                "observedGeneration": 1,
            }
        ],
    }
    status = TorchrunJob.from_json(raw).status
    assert status.phase is JobPhase.RUNNING
    assert status.start_time == datetime.datetime(2025, 1, 1, 10, tzinfo=datetime.timezone.utc)
    assert status.conditions[0].status is ConditionStatus.TRUE
    assert status.completion_time is None
    out = to_json(status)
    assert out["startTime"] == "2025-01-01T10:00:00Z"
    assert "completionTime" not in out
    assert out["conditions"][0]["lastTransitionTime"] == "2025-01-01T10:05:00Z"
    assert out["workers"] == {"active": 2, "ready": 2, "succeeded": 0, "failed": 0}
    assert TorchrunJob.from_json({**raw, "status": out}).status == status


def test_spec_round_trips_through_json() -> None:
    raw = queue(
        nodeResources={"gpus": 8, "cpus": 96, "memory": "1024Gi"},
        storage={"checkpoints": {"enabled": True, "sizePerGPU": "1.5Ti"}},
        quota={"gpu": {"quota": 8, "limit": "16"}},
        scheduling={"scheduler": "kai-scheduler", "tolerations": [{"key": "k", "operator": "Exists"}]},
    )
    spec = TorchrunQueue.from_json(raw).spec
    out = to_json(spec)
    assert out["nodeResources"] == {
        "gpus": 8,
        "cpus": "96",
        "memory": "1Ti",
        "gpuResourceName": "nvidia.com/gpu",
    }
    assert out["storage"]["checkpoints"]["sizePerGPU"] == "1536Gi"
    assert out["scheduling"]["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert TorchrunQueue.from_json({"spec": out}).spec == spec


def test_overrides_report_the_fields_they_set() -> None:
    overrides = TorchrunJob.from_json(
        job(overrides={"image": "img", "env": [{"name": "A", "value": "1"}], "nodeSelector": {"a": "b"}})
    ).spec.overrides
    assert overrides is not None
    assert overrides.fields_set() == (Overridable.IMAGE, Overridable.ENV, Overridable.NODE_SELECTOR)
    assert JobOverrides().fields_set() == ()


def test_overridable_names_are_exactly_the_override_fields() -> None:
    assert [o.value for o in Overridable] == [f.json_name for f in resolved_fields(JobOverrides)]


def test_frozen_cache_objects_parse_like_raw_json() -> None:
    """The informer cache hands out FrozenDicts with tuples for lists; parsing must not care."""
    samples = Path(__file__).resolve().parents[2] / "config" / "samples"
    for path in sorted(samples.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        cls = TorchrunQueue if raw["kind"] == "TorchrunQueue" else TorchrunJob
        assert cls.from_json(freeze(raw)) == cls.from_json(raw), path.name
