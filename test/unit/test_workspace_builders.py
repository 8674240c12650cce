"""Pure builders of the workspace: PVCs, the sync pod per source, the workers' storage, and the
reading of a sync pod's result (docs/workspace.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jobspecs import job, queue, worker

from controller.api import TorchrunJob, TorchrunQueue, resolve_topology
from controller.torchrunjob.manifests.storage import (
    build_checkpoints_pvc,
    build_workspace_pvc,
    is_reattachable,
)
from controller.torchrunjob.manifests.syncpod import build_sync_pod, sync_pod_state


def topo(j: TorchrunJob, q: TorchrunQueue) -> Any:
    return resolve_topology(j.spec, q.spec.node_resources)


def sync_pod(j: TorchrunJob, q: TorchrunQueue, generation: int = 0) -> dict[str, Any]:
    return build_sync_pod(j, q, topo(j, q), generation=generation, image="sync:1", upload_timeout=600)


def test_the_workspace_claim_is_sized_per_gpu_of_the_whole_job_and_owned() -> None:
    q = queue(storage={"workspace": {"sizePerGPU": "2Gi", "storageClassName": "fast"}})
    j = job(numNodes=3)
    pvc = build_workspace_pvc(j, q, topo(j, q))
    assert pvc["metadata"]["name"] == "j-workspace"
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "48Gi"}},  # 2Gi × 3 nodes × 8 GPUs
        "storageClassName": "fast",
    }
    assert pvc["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_an_elastic_job_claims_for_its_largest_size_and_a_cpu_node_counts_as_one_gpu() -> None:
    q = queue(nodeResources={"gpus": 0, "cpus": "4"}, storage={"workspace": {"sizePerGPU": "1Gi"}})
    j = job(numNodes=2, elastic={"minNodes": 1, "maxNodes": 5})
    assert build_workspace_pvc(j, q, topo(j, q))["spec"]["resources"]["requests"]["storage"] == "5Gi"


def test_persisted_checkpoints_have_no_owner_and_are_labelled() -> None:
    q = queue(storage={"checkpoints": {"enabled": True, "persist": True, "sizePerGPU": "1Gi"}})
    j = job()
    pvc = build_checkpoints_pvc(j, q, topo(j, q))
    assert "ownerReferences" not in pvc["metadata"]
    assert pvc["metadata"]["labels"] == {
        "torchrun-job-name": "j",
        "torchrun.ai/role": "worker",
        "torchrun.ai/persist": "true",
    }
    assert is_reattachable(pvc, j)
    assert not is_reattachable(pvc, job_named("other"))
    users = {**pvc, "metadata": {**pvc["metadata"], "labels": {"torchrun-job-name": "j"}}}
    assert not is_reattachable(users, j), "without our persist label it is a user's claim"
    owned = build_checkpoints_pvc(j, queue(storage={"checkpoints": {"enabled": True}}), topo(j, q))
    assert owned["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert not is_reattachable(owned, j)


def job_named(name: str) -> TorchrunJob:
    return TorchrunJob.from_json(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": "u-2"},
            "spec": {"jobQueue": "q", "numNodes": 1, "command": "python t.py"},
        }
    )


@pytest.mark.parametrize(
    ("workspace", "args", "mounts", "extra"),
    [
        ({"source": "upload"}, ["--source", "upload", "--timeout", "600"], set(), {}),
        (
            {"source": "git", "git": {"url": "https://git.example/r.git", "ref": "v1", "secret": "creds"}},
            ["--source", "git", "--url", "https://git.example/r.git", "--ref", "v1"],
            {"/var/run/secrets/torchrun.ai/source"},
            {},
        ),
        (
            {"source": "s3", "s3": {"uri": "s3://bucket/code.tar.gz", "secret": "aws"}},
            ["--source", "s3", "--uri", "s3://bucket/code.tar.gz"],
            set(),
            {"envFrom": [{"secretRef": {"name": "aws"}}]},
        ),
        (
            {"source": "pvc", "pvc": {"claimName": "code", "subPath": "proj"}},
            ["--source", "pvc", "--sub-path", "proj"],
            {"/source"},
            {},
        ),
    ],
    ids=["upload", "git", "s3", "pvc"],
)
def test_the_sync_pod_fetches_its_source_into_the_workspace(
    workspace: dict[str, Any], args: list[str], mounts: set[str], extra: dict[str, Any]
) -> None:
    j, q = job(workspace=workspace), queue()
    pod = sync_pod(j, q, generation=3)
    assert pod["metadata"]["name"] == "j-sync-3"
    assert pod["metadata"]["annotations"] == {"torchrun.ai/workspace-generation": "3"}
    assert pod["metadata"]["labels"]["torchrun.ai/role"] == "sync"
    (c,) = pod["spec"]["containers"]
    assert c["command"] == [
        "python", "-m", "controller.sync", "fetch", *args,
        "--generation", "3", "--max-bytes", str(10 * 2**30 * 16),
    ]  # fmt: skip
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/workspace", *mounts}
    assert {k: c[k] for k in extra} == extra
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["restartPolicy"] == "Never"
    assert c["securityContext"]["runAsNonRoot"] is True


def test_workers_copy_the_code_from_the_workspace_and_mount_checkpoints_and_datasets() -> None:
    q = queue(
        storage={
            "checkpoints": {"enabled": True},
            "datasets": {"claimName": "imagenet", "mountPath": "/data"},
        },
        securityContext={"runAsUser": 1000},
    )
    j = job(workspace={"source": "upload", "mountPath": "/code"})
    manifest = worker(j, q, generation=4, sync_image="sync:1")
    pod = manifest["spec"]["template"]["spec"]
    prepare, init, reporter = pod["initContainers"]
    assert reporter["name"] == "progress-reporter" and reporter["image"] == "sync:1"
    assert prepare["name"] == "prepare" and prepare["image"] == init["image"] == "sync:1"
    assert init["command"] == [
        "python", "-m", "controller.sync", "copy",
        "--min-generation", "4", "--target", "/code", "--timeout", "600",
    ]  # fmt: skip
    assert init["securityContext"] == pod["containers"][0]["securityContext"]
    assert init["securityContext"]["runAsUser"] == 1000
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert set(mounts) == {
        "/dev/shm",
        "/opt/torchrun",
        "/code",
        "/checkpoints",
        "/data",
        "/var/run/torchrun-progress",
    }
    assert mounts["/data"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"] == {"claimName": "j-workspace", "readOnly": True}
    assert volumes["datasets"]["persistentVolumeClaim"] == {"claimName": "imagenet", "readOnly": True}
    assert manifest["metadata"]["annotations"]["torchrun.ai/workspace-generation"] == "4"


def test_a_job_without_a_workspace_gets_no_code_copy_but_still_its_tools() -> None:
    j, q = job(workspace={"source": "none"}), queue()
    pod = worker(j, q, generation=0, sync_image="sync:1")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["prepare", "progress-reporter"]
    assert [v["name"] for v in pod["volumes"]] == [
        "dshm",
        "torchrun-tools",
        "torchrun-progress",
        "torchrun-progress-token",
    ]


def ended(phase: str, message: str, finished: str = "2026-11-23T12:00:00Z") -> dict[str, Any]:
    terminated = {"exitCode": 0 if phase == "Succeeded" else 1, "message": message, "finishedAt": finished}
    return {
        "metadata": {"name": "j-sync-0"},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "sync", "state": {"terminated": terminated}}],
        },
    }


OK = json.dumps(
    {"result": "Synced", "generation": 0, "sha256": "ab" * 32, "files": 2, "bytes": 10, "source": "upload"}
)


def test_a_sync_pod_counts_only_when_it_succeeded_with_the_marker_of_its_generation() -> None:
    state = sync_pod_state(ended("Succeeded", OK), 0)
    assert state.synced and state.result is not None and state.result.sha256 == "ab" * 32
    assert state.finished_at is not None
    assert not sync_pod_state(ended("Succeeded", OK), 1).synced, "a marker of another generation"
    assert not sync_pod_state(ended("Succeeded", ""), 0).synced, "success without the marker"
    assert not sync_pod_state(ended("Failed", OK), 0).synced, "the marker but a failed pod"
    assert not sync_pod_state({"metadata": {"name": "x"}, "status": {"phase": "Running"}}, 0).done


def test_a_sync_container_that_exited_0_counts_before_the_pods_phase_says_so() -> None:
    """The kubelet reports the container's end about a second before the pod's phase."""

    def pod(phase: str, code: int, message: str = OK) -> dict[str, Any]:
        got = ended(phase, message)
        got["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = code
        return got

    assert sync_pod_state(pod("Running", 0), 0).synced
    assert not sync_pod_state(pod("Running", 0), 1).synced, "a marker of another generation"
    assert not sync_pod_state(pod("Running", 1), 0).done, "a failure waits for the pod's phase"
    assert not sync_pod_state(pod("Failed", 0), 0).synced, "a failed pod never counts"


def test_a_failed_sync_pod_gives_the_sync_programs_reason() -> None:
    failed = json.dumps(
        {"result": "Failed", "generation": 0, "reason": "GitFetchFailed", "message": "no ref x"}
    )
    state = sync_pod_state(ended("Failed", failed), 0)
    assert state.done and not state.synced and state.result is not None
    assert (state.result.reason, state.result.message) == ("GitFetchFailed", "no ref x")
    garbage = sync_pod_state(ended("Failed", "Traceback (most recent call last): ..."), 0)
    assert garbage.result is not None and garbage.result.reason == "SyncFailed" and not garbage.synced
