"""The workspace on the real control plane (docs/workspace.md): PVCs, the sync pod, uploads through
the kube-apiserver's exec endpoint, marker-verified readiness, checkpoints, hot reload.

What is real and what stands in: the API server, kcm (PV binding, owner-reference GC, the Job
controller) and the scheduler are real; the archive travels through the kube-apiserver's
`pods/exec` endpoint (kubectl exec) into this project's sync program, which really runs as a local
process against a directory standing for the PVC. The pods are kwok's: the test bed's node agent
plays the kubelet for sync pods (runs their container's command, reports the exit code and the
termination message) and a hostPath provisioner stands for a storage driver (hack/testbed/).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jobs import make_job, queue_manifest
from testbed import Cluster, condition, wait_until
from uploads import archive, upload, wait_running

from controller.cmd.main import App


def job(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.get("torchrunjob", name, "-n", ns)


def with_condition(cluster: Cluster, ns: str, name: str, ctype: str, reason: str) -> dict[str, Any] | None:
    obj = job(cluster, ns, name)
    c = condition(obj, ctype)
    return obj if c is not None and c["reason"] == reason else None


def set_generation(cluster: Cluster, ns: str, name: str, generation: int) -> None:
    """What `kubectl torchrun sync` does before it uploads: ask for the next generation."""
    patch = json.dumps({"spec": {"workspace": {"generation": generation}}})
    cluster.kubectl("patch", "torchrunjob", name, "-n", ns, "--type=merge", "-p", patch)


def gone(cluster: Cluster, ns: str, kind: str, name: str) -> bool:
    return not cluster.get(kind, "-n", ns, "--field-selector", f"metadata.name={name}")["items"]


def events(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get(
        "events", "-n", ns, "--field-selector", f"involvedObject.name={name}"
    )["items"]
    return items


@pytest.fixture
def upload_queue(cluster: Cluster) -> Any:
    made: list[str] = []

    def make(name: str, **spec: Any) -> str:
        cluster.apply(queue_manifest(name, **spec))
        made.append(name)
        return name

    yield make
    for name in made:
        cluster.kubectl("delete", "torchrunqueue", name, "--ignore-not-found", "--wait=false")


def submit_upload_job(cluster: Cluster, ns: str, queue: str, name: str = "train", **spec: Any) -> str:
    spec.setdefault("workspace", {"source": "upload"})
    return make_job(cluster, ns, queue, name, **spec)


def test_an_upload_job_waits_for_its_code_then_runs_it(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App], upload_queue: Any
) -> None:
    """PVC and sync-0 first; no worker Job until the sync pod succeeded with the marker of
    generation 0; then the Job mounts the code through the init container."""
    app = start_controller()
    q = upload_queue("ws-upload")
    submit_upload_job(cluster, namespace, q)
    syncing = wait_until(
        lambda: with_condition(cluster, namespace, "train", "WorkspaceReady", "Syncing"),
        60,
        message="Syncing",
    )
    assert syncing["status"]["phase"] == "Syncing"
    pvc = cluster.get("pvc", "train-workspace", "-n", namespace)
    assert pvc["spec"]["resources"]["requests"]["storage"] == "160Gi"  # 10Gi × 16 GPUs
    assert pvc["metadata"]["ownerReferences"][0]["uid"] == syncing["metadata"]["uid"]
    wait_running(cluster, namespace, "train-sync-0")
    assert not cluster.get("jobs", "-n", namespace)["items"], "the worker Job must wait for the code"

    data = archive({"train.py": b"print('hello')\n", "pkg/model.py": b"W = 1\n"})
    sha = hashlib.sha256(data).hexdigest()
    done = upload(cluster, namespace, "train-sync-0", data, 0)
    assert done.returncode == 0, done.stderr.decode()
    ready = wait_until(
        lambda: with_condition(cluster, namespace, "train", "WorkspaceReady", "Synced"), 60, message="Synced"
    )
    assert ready["status"]["workspaceGeneration"] == 0
    assert ready["status"]["workspaceSha256"] == sha
    worker = wait_until(lambda: cluster.get("jobs", "-n", namespace)["items"], 30, message="worker Job")[0]
    pod = worker["spec"]["template"]["spec"]
    prepare, init, reporter = pod["initContainers"]
    assert reporter["name"] == "progress-reporter" and reporter["restartPolicy"] == "Always"
    assert prepare["command"][:4] == ["python", "-m", "controller.sync", "prepare"]
    assert init["command"][:4] == ["python", "-m", "controller.sync", "copy"]
    assert {"name": "code", "mountPath": "/app"} in pod["containers"][0]["volumeMounts"]
    claim = {v["name"]: v for v in pod["volumes"]}["workspace"]["persistentVolumeClaim"]
    assert claim == {"claimName": "train-workspace", "readOnly": True}
    wait_until(
        lambda: with_condition(cluster, namespace, "train", "Running", "AllWorkersRunning"),
        60,
        message="Running",
    )
    app.recorder.flush()
    assert "Synced" in {e["reason"] for e in events(cluster, namespace, "train")}


@pytest.mark.parametrize(
    ("data", "sha", "reason"),
    [
        (b"this is not a gzip stream at all", None, "InvalidArchive"),
        (archive({"../escape.py": b"x"}), None, "InvalidArchive"),
        (archive({"train.py": b"x"}), "0" * 64, "ChecksumMismatch"),
    ],
    ids=["garbage", "traversal", "wrong-checksum"],
)
def test_a_refused_upload_gives_its_reason_and_no_workers(
    cluster: Cluster,
    namespace: str,
    start_controller: Callable[..., App],
    upload_queue: Any,
    data: bytes,
    sha: str | None,
    reason: str,
) -> None:
    app = start_controller()
    q = upload_queue("ws-bad")
    submit_upload_job(cluster, namespace, q)
    wait_running(cluster, namespace, "train-sync-0")
    refused = upload(cluster, namespace, "train-sync-0", data, 0, sha)
    assert refused.returncode != 0
    assert reason in refused.stderr.decode(), refused.stderr.decode()
    failed = wait_until(
        lambda: with_condition(cluster, namespace, "train", "WorkspaceReady", reason), 60, message=reason
    )
    assert condition(failed, "WorkspaceReady")["status"] == "False"
    assert "workspaceSha256" not in failed["status"] and "workspaceSyncTime" not in failed["status"]
    assert not cluster.get("jobs", "-n", namespace)["items"]
    app.recorder.flush()
    warnings = [e for e in events(cluster, namespace, "train") if e["reason"] == reason]
    assert warnings and warnings[0]["type"] == "Warning"


def test_a_claim_that_never_binds_is_claim_not_bound_with_its_events(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App], upload_queue: Any
) -> None:
    """A StorageClass nobody provisions for (it exists, so the queue is Ready): the claim stays
    Pending, and past --claim-bind-timeout the condition quotes the binder's own Event."""
    klass = f"nobody-{namespace}"
    cluster.apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": klass},
            "provisioner": "example.com/nobody",
            "volumeBindingMode": "Immediate",
        }
    )
    try:
        start_controller("--claim-bind-timeout", "3")
        q = upload_queue("ws-nobind", storage={"workspace": {"storageClassName": klass}})
        submit_upload_job(cluster, namespace, q)
        stuck = wait_until(
            lambda: with_condition(cluster, namespace, "train", "WorkspaceReady", "ClaimNotBound"),
            60,
            message="ClaimNotBound",
        )
    finally:
        cluster.kubectl("delete", "storageclass", klass, "--ignore-not-found")
    message = condition(stuck, "WorkspaceReady")["message"]
    assert "train-workspace" in message and klass in message
    assert "example.com/nobody" in message, message  # kcm's ExternalProvisioning event, quoted
    assert stuck["status"]["phase"] == "Pending"
    assert not cluster.get("jobs", "-n", namespace)["items"]


def test_persisted_checkpoints_survive_the_job_and_are_mounted_again(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App], upload_queue: Any
) -> None:
    start_controller()
    q = upload_queue("ws-persist", storage={"checkpoints": {"enabled": True, "persist": True}})
    make_job(cluster, namespace, q)
    first = wait_until(
        lambda: with_condition(cluster, namespace, "train", "Running", "AllWorkersRunning"),
        60,
        message="Running",
    )
    pvc = cluster.get("pvc", "train-checkpoints", "-n", namespace)
    assert "ownerReferences" not in pvc["metadata"]
    assert pvc["metadata"]["labels"]["torchrun.ai/persist"] == "true"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "800Gi"  # 50Gi × 16 GPUs
    cluster.kubectl("delete", "torchrunjob", "train", "-n", namespace, "--wait=true")
    wait_until(lambda: not cluster.get("jobs", "-n", namespace)["items"], 60, message="the worker Job gone")
    assert (
        cluster.get("pvc", "train-checkpoints", "-n", namespace)["metadata"]["uid"] == pvc["metadata"]["uid"]
    )

    make_job(cluster, namespace, q)
    second = wait_until(
        lambda: with_condition(cluster, namespace, "train", "Running", "AllWorkersRunning"),
        60,
        message="rerun",
    )
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    worker = cluster.get("job", "train", "-n", namespace)
    volumes = {v["name"]: v for v in worker["spec"]["template"]["spec"]["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == "train-checkpoints"
    assert (
        cluster.get("pvc", "train-checkpoints", "-n", namespace)["metadata"]["uid"] == pvc["metadata"]["uid"]
    )


def test_checkpoints_without_persist_go_with_the_job(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App], upload_queue: Any
) -> None:
    start_controller()
    q = upload_queue("ws-ephemeral", storage={"checkpoints": {"enabled": True}})
    made = make_job(cluster, namespace, q)
    wait_until(lambda: with_condition(cluster, namespace, made, "Running", "AllWorkersRunning"), 60)
    pvc = cluster.get("pvc", "train-checkpoints", "-n", namespace)
    assert pvc["metadata"]["ownerReferences"][0]["kind"] == "TorchrunJob"
    cluster.kubectl("delete", "torchrunjob", "train", "-n", namespace, "--wait=true")
    wait_until(
        lambda: gone(cluster, namespace, "pvc", "train-checkpoints"), 60, message="PVC deleted with its job"
    )


def test_hot_reload_rolls_the_workers_onto_the_new_generation_and_a_failed_one_changes_nothing(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App], upload_queue: Any
) -> None:
    app = start_controller()
    q = upload_queue("ws-reload")
    submit_upload_job(cluster, namespace, q)
    wait_running(cluster, namespace, "train-sync-0")
    assert upload(cluster, namespace, "train-sync-0", archive({"train.py": b"v0"}), 0).returncode == 0
    running = wait_until(
        lambda: with_condition(cluster, namespace, "train", "Running", "AllWorkersRunning"),
        90,
        message="Running",
    )
    uids = {
        kind: cluster.get(kind, name, "-n", namespace)["metadata"]["uid"]
        for kind, name in (("job", "train"), ("service", "train"), ("pvc", "train-workspace"))
    }
    before = {p["metadata"]["uid"] for p in worker_pods(cluster, namespace)}
    assert len(before) == 2

    set_generation(cluster, namespace, "train", 1)
    wait_running(cluster, namespace, "train-sync-1")
    # the pass that creates the sync pod writes the status after it: the pod can run first
    reloading = wait_until(
        lambda: with_condition(cluster, namespace, "train", "WorkspaceReady", "Reloading"),
        10,
        interval=0.2,
        message="WorkspaceReady=False Reloading",
    )
    assert reloading["status"]["phase"] == "Running"
    v1 = archive({"train.py": b"v1"})
    assert upload(cluster, namespace, "train-sync-1", v1, 1).returncode == 0
    wait_until(
        lambda: job(cluster, namespace, "train")["status"].get("workspaceGeneration") == 1,
        60,
        message="gen 1",
    )
    after = wait_until(
        lambda: (
            ps
            if len(ps := {p["metadata"]["uid"] for p in worker_pods(cluster, namespace, running=True)}) == 2
            and not ps & before
            else None
        ),
        90,
        message="both workers replaced",
    )
    assert after.isdisjoint(before)
    for kind, name in (("job", "train"), ("service", "train"), ("pvc", "train-workspace")):
        assert cluster.get(kind, name, "-n", namespace)["metadata"]["uid"] == uids[kind], kind
    reloaded = job(cluster, namespace, "train")
    assert reloaded["status"]["workspaceSha256"] == hashlib.sha256(v1).hexdigest()
    assert reloaded["status"]["restarts"] == running["status"]["restarts"] == 0
    assert not reloaded["status"].get("disruptions"), "the reload's own evictions taken for a disruption"
    app.recorder.flush()
    assert "WorkspaceReloaded" in {e["reason"] for e in events(cluster, namespace, "train")}
    wait_until(lambda: gone(cluster, namespace, "pods", "train-sync-0"), 60, message="old sync pod removed")

    # a failed generation 2 leaves generation 1 and its pods alone
    set_generation(cluster, namespace, "train", 2)
    wait_running(cluster, namespace, "train-sync-2")
    assert upload(cluster, namespace, "train-sync-2", b"garbage", 2).returncode != 0
    failed = wait_until(
        lambda: with_condition(cluster, namespace, "train", "WorkspaceReady", "ReloadFailed"),
        60,
        message="ReloadFailed",
    )
    assert failed["status"]["workspaceGeneration"] == 1
    assert "InvalidArchive" in condition(failed, "WorkspaceReady")["message"]
    assert {p["metadata"]["uid"] for p in worker_pods(cluster, namespace)} == after


def test_the_generation_may_only_grow(cluster: Cluster, namespace: str, crds: Any, upload_queue: Any) -> None:
    q = upload_queue("ws-grow")
    submit_upload_job(cluster, namespace, q, workspace={"source": "upload", "generation": 2})
    refused = cluster.kubectl(
        "patch", "torchrunjob", "train", "-n", namespace, "--type=merge", "-p",
        '{"spec":{"workspace":{"generation":1}}}', check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "spec.workspace.generation" in refused.stderr and "only grow" in refused.stderr


def test_autoclean_removes_the_workspace_and_sync_pods_of_a_finished_job(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App], upload_queue: Any
) -> None:
    start_controller("--autoclean")
    q = upload_queue(
        "ws-clean", outcome="succeed", storage={"checkpoints": {"enabled": True, "persist": True}}
    )
    submit_upload_job(cluster, namespace, q)
    wait_running(cluster, namespace, "train-sync-0")
    assert upload(cluster, namespace, "train-sync-0", archive({"train.py": b"x"}), 0).returncode == 0
    wait_until(
        lambda: with_condition(cluster, namespace, "train", "Succeeded", "Succeeded"), 90, message="done"
    )

    def cleaned() -> bool:
        claims = {p["metadata"]["name"] for p in cluster.get("pvc", "-n", namespace)["items"]}
        pods = cluster.get("pods", "-n", namespace)["items"]
        return "train-workspace" not in claims and not pods

    wait_until(cleaned, 60, message="workspace PVC and sync pods gone")
    assert cluster.get("pvc", "train-checkpoints", "-n", namespace)  # persisted: stays
    assert job(cluster, namespace, "train")["status"]["phase"] == "Succeeded"


def worker_pods(cluster: Cluster, ns: str, *, running: bool = False) -> list[dict[str, Any]]:
    pods = cluster.get("pods", "-n", ns, "-l", "torchrun.ai/role=worker")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return [p for p in live if p["status"].get("phase") == "Running"] if running else live


def test_a_pvc_source_is_copied_into_the_workspace_then_runs(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App], upload_queue: Any
) -> None:
    """`source: pvc`: the sync pod copies the claim's subPath; nothing is uploaded."""
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "code"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        },
        namespace,
    )
    bound = wait_until(
        lambda: (c := cluster.get("pvc", "code", "-n", namespace))["status"].get("phase") == "Bound" and c,
        60,
        message="the source claim bound",
    )
    pv = cluster.get("pv", bound["spec"]["volumeName"])
    root = Path(pv["spec"]["hostPath"]["path"]) / "proj"  # the test bed's provisioner: a directory
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('from a claim')\n")
    (root / "pkg" / "m.py").write_text("X = 1\n")
    start_controller()
    q = upload_queue("ws-pvc")
    make_job(
        cluster, namespace, q, workspace={"source": "pvc", "pvc": {"claimName": "code", "subPath": "proj"}}
    )
    ready = wait_until(
        lambda: with_condition(cluster, namespace, "train", "WorkspaceReady", "Synced"), 90, message="Synced"
    )
    assert ready["status"]["workspaceGeneration"] == 0 and ready["status"]["workspaceSyncTime"]
    sync = cluster.get("pod", "train-sync-0", "-n", namespace)
    report = json.loads(sync["status"]["containerStatuses"][0]["state"]["terminated"]["message"])
    assert (report["result"], report["source"]) == ("Synced", "pvc")
    workspace = cluster.get(
        "pv", cluster.get("pvc", "train-workspace", "-n", namespace)["spec"]["volumeName"]
    )
    copied = Path(workspace["spec"]["hostPath"]["path"]) / "generations" / "0"
    assert (copied / "train.py").read_text() == "print('from a claim')\n"
    assert (copied / "pkg" / "m.py").read_text() == "X = 1\n"
    assert (copied / ".sync_success").exists()
    wait_until(
        lambda: with_condition(cluster, namespace, "train", "Running", "AllWorkersRunning"),
        60,
        message="Running",
    )


def test_an_unreachable_git_repository_is_git_fetch_failed(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App], upload_queue: Any
) -> None:
    start_controller()
    q = upload_queue("ws-git")
    url = "git://127.0.0.1:9/no/such/repo.git"  # the discard port: nothing answers git there
    make_job(cluster, namespace, q, workspace={"source": "git", "git": {"url": url, "ref": "main"}})
    failed = wait_until(
        lambda: with_condition(cluster, namespace, "train", "WorkspaceReady", "GitFetchFailed"),
        120,
        message="GitFetchFailed",
    )
    message = condition(failed, "WorkspaceReady")["message"]
    assert url in message and "train-sync-0" in message
    assert failed["status"]["phase"] == "Pending"
    assert not cluster.get("jobs", "-n", namespace)["items"]
