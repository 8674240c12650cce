"""The test bed's stand-in for a kubelet and a storage provisioner (hack/testbed/nodeagent).

Claims of the default StorageClass get a hostPath volume under the run directory; a sync pod on
a kwok node runs this checkout's sync program as a local process against that directory;
`kubectl exec` and `kubectl logs` reach it through the real kube-apiserver and kwok; worker pods
have logs; stopping the control plane leaves no process of the agent's behind.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

from sync_archives import file, tar_gz
from testbed import Cluster, wait_until

SYNC_LABELS = {"torchrun.ai/role": "sync", "torchrun-job-name": "demo"}


def claim(name: str, storage_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "64Mi"}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


def sync_pod(
    name: str,
    claim_name: str,
    command: list[str],
    env: list[dict[str, Any]] | None = None,
    mounts: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    **container: Any,
) -> dict[str, Any]:
    """A sync pod shaped like the controller's (controller/torchrunjob/manifests/syncpod.py)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": SYNC_LABELS},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532},
            "containers": [
                {
                    "name": "sync",
                    "image": "ghcr.io/torchrun-ai/torchrun-controller:0.1.0",
                    "command": command,
                    "env": [{"name": "TORCHRUN_WORKSPACE", "value": "/workspace"}, *(env or [])],
                    "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}, *(mounts or [])],
                    "terminationMessagePolicy": "File",
                    **container,
                }
            ],
            "volumes": [
                {"name": "workspace", "persistentVolumeClaim": {"claimName": claim_name}},
                *(volumes or []),
            ],
        },
    }


def fetch_upload(generation: int = 0) -> list[str]:
    return ["python", "-m", "controller.sync", "fetch", "--source", "upload", "--generation", str(generation),
            "--timeout", "120"]  # fmt: skip


def archive(files: dict[str, bytes]) -> bytes:
    return tar_gz(file(path, data) for path, data in sorted(files.items()))


def kubectl_bytes(
    cluster: Cluster, *args: str, data: bytes = b"", timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(cluster.kubectl_path), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=data,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def receive(
    cluster: Cluster, ns: str, pod: str, data: bytes, generation: int = 0
) -> subprocess.CompletedProcess[bytes]:
    """What the plugin does: the archive through the API server's exec into `receive`."""
    sha = hashlib.sha256(data).hexdigest()
    command = ["python", "-m", "controller.sync", "receive", "--generation", str(generation),
               "--size", str(len(data)), "--sha256", sha]  # fmt: skip
    return kubectl_bytes(cluster, "exec", "-i", "-n", ns, pod, "-c", "sync", "--", *command, data=data)


def phase(cluster: Cluster, ns: str, pod: str) -> str:
    return str(cluster.get("pod", pod, "-n", ns).get("status", {}).get("phase"))


def wait_phase(cluster: Cluster, ns: str, pod: str, *phases: str, timeout: float = 90) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        got = cluster.get("pod", pod, "-n", ns)
        return got if got.get("status", {}).get("phase") in phases else None

    return wait_until(reached, timeout, 0.2, message=f"pod {pod} {'/'.join(phases)}")


def terminated(pod: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]
    assert "terminated" in state, state
    return dict(state["terminated"])


def volume_dir(cluster: Cluster, ns: str, claim_name: str) -> Path:
    pvc = wait_until(
        lambda: (c := cluster.get("pvc", claim_name, "-n", ns))["status"].get("phase") == "Bound" and c,
        60,
        message=f"claim {claim_name} Bound",
    )
    pv = cluster.get("pv", pvc["spec"]["volumeName"])
    return Path(pv["spec"]["hostPath"]["path"])


def processes_with(token: str, but: int | None = None) -> list[int]:
    """PIDs of live processes (but this one and `but`) whose command line contains `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in (os.getpid(), but):
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# -- storage ------------------------------------------------------------------------------------


def test_claim_of_the_default_class_gets_a_directory_that_goes_with_it(
    cluster: Cluster, namespace: str
) -> None:
    cluster.apply(claim("data"), namespace)
    path = volume_dir(cluster, namespace, "data")
    pvc = cluster.get("pvc", "data", "-n", namespace)
    pv = cluster.get("pv", pvc["spec"]["volumeName"])
    assert pvc["spec"]["storageClassName"] == "standard", "the default class is filled in"
    assert pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    assert pv["spec"]["capacity"]["storage"] == "64Mi"
    assert path.parent == cluster.run_dir / "volumes" and path.is_dir()

    cluster.kubectl("delete", "pvc", "data", "-n", namespace)
    wait_until(
        lambda: not cluster.found("pv", pv["metadata"]["name"]),
        60,
        message="the released volume deleted",
    )
    assert not path.exists()


def test_claim_of_a_missing_class_stays_pending_with_an_event(cluster: Cluster, namespace: str) -> None:
    cluster.apply(claim("orphan", storage_class="no-such-class"), namespace)

    def event() -> dict[str, Any] | None:
        events = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=orphan")[
            "items"
        ]
        return next((e for e in events if e["reason"] == "ProvisioningFailed"), None)

    found = wait_until(event, 60, message="a ProvisioningFailed event")
    assert 'storageclass.storage.k8s.io "no-such-class" not found' in found["message"]
    pvc = cluster.get("pvc", "orphan", "-n", namespace)
    assert pvc["status"]["phase"] == "Pending" and not pvc["spec"].get("volumeName")


# -- sync pods ------------------------------------------------------------------------------------


def test_upload_through_kubectl_exec_into_the_sync_program(cluster: Cluster, namespace: str) -> None:
    cluster.apply(
        [claim("demo-workspace"), sync_pod("demo-sync-0", "demo-workspace", fetch_upload())], namespace
    )
    wait_phase(cluster, namespace, "demo-sync-0", "Running")
    path = volume_dir(cluster, namespace, "demo-workspace")
    files = {"train.py": b"print('hello')\n", "pkg/util.py": b"X = 1\n"}
    data = archive(files)

    done = receive(cluster, namespace, "demo-sync-0", data)
    assert done.returncode == 0, done.stderr.decode()
    marker = json.loads(done.stdout)
    assert (marker["generation"], marker["sha256"]) == (0, hashlib.sha256(data).hexdigest())

    pod = wait_phase(cluster, namespace, "demo-sync-0", "Succeeded", "Failed")
    term = terminated(pod)
    assert pod["status"]["phase"] == "Succeeded", term
    assert (term["exitCode"], term["reason"]) == (0, "Completed")
    report = json.loads(term["message"])
    assert report["result"] == "Synced" and report["generation"] == 0
    assert report["sha256"] == hashlib.sha256(data).hexdigest() and report["source"] == "upload"
    assert not pod["status"]["containerStatuses"][0]["ready"]
    for name, content in files.items():
        assert (path / "generations" / "0" / name).read_bytes() == content
    assert (path / "CURRENT").read_text().strip() == "0"

    logs = cluster.kubectl("logs", "-n", namespace, "demo-sync-0").stdout
    assert "Synced generation 0 from upload" in logs
    timestamps = cluster.kubectl("logs", "-n", namespace, "demo-sync-0", "--timestamps").stdout
    assert timestamps.split(" ", 1)[0].endswith("Z"), "CRI records carry their time"


def test_bad_archive_fails_the_sync_pod_with_its_reason(cluster: Cluster, namespace: str) -> None:
    cluster.apply(
        [claim("bad-workspace"), sync_pod("bad-sync-0", "bad-workspace", fetch_upload())], namespace
    )
    wait_phase(cluster, namespace, "bad-sync-0", "Running")
    path = volume_dir(cluster, namespace, "bad-workspace")

    done = receive(cluster, namespace, "bad-sync-0", b"this is not a gzip stream at all" * 8)
    assert done.returncode != 0, "kubectl sees the sync program's failure"
    assert b"InvalidArchive" in done.stderr

    pod = wait_phase(cluster, namespace, "bad-sync-0", "Succeeded", "Failed")
    term = terminated(pod)
    assert pod["status"]["phase"] == "Failed"
    assert (term["exitCode"], term["reason"]) == (1, "Error")
    report = json.loads(term["message"])
    assert (report["result"], report["reason"]) == ("Failed", "InvalidArchive")
    assert not (path / "generations" / "0").exists()
    assert (path / "generations" / "0.failed").exists()
    assert "InvalidArchive" in cluster.kubectl("logs", "-n", namespace, "bad-sync-0").stdout


def test_exec_sees_the_volume_and_a_failing_command_is_a_failed_exec(
    cluster: Cluster, namespace: str
) -> None:
    cluster.apply([claim("ex-workspace"), sync_pod("ex-sync-0", "ex-workspace", fetch_upload())], namespace)
    wait_phase(cluster, namespace, "ex-sync-0", "Running")
    path = volume_dir(cluster, namespace, "ex-workspace")

    shown = cluster.kubectl(
        "exec", "-n", namespace, "ex-sync-0", "--", "sh", "-c", 'echo "$TORCHRUN_WORKSPACE"'
    )
    assert shown.stdout.strip() == str(path)
    failing = cluster.kubectl(
        "exec", "-n", namespace, "ex-sync-0", "--", "python", "-c", "import sys; sys.exit(3)", check=False
    )
    assert failing.returncode != 0
    assert "exit status 3" in failing.stderr


def test_sync_container_gets_its_secrets_env_and_termination_message(
    cluster: Cluster, namespace: str
) -> None:
    """The runner itself, with a trivial program: env from Secrets, a Secret volume, the exit code
    and the termination-log file, as the git and s3 sources will need them."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds"},
        "data": {
            k: base64.b64encode(v.encode()).decode() for k, v in {"username": "u", "password": "p"}.items()
        },
    }
    program = (
        "import json, os, pathlib, sys\n"
        "d = os.environ['TORCHRUN_SOURCE_SECRET_DIR']\n"
        "seen = {'user': os.environ['GIT_USER'], 'password': os.environ['password'],\n"
        "        'file': pathlib.Path(d, 'username').read_text(), 'arg': sys.argv[1]}\n"
        "pathlib.Path(os.environ['TORCHRUN_TERMINATION_LOG']).write_text(json.dumps(seen))\n"
        "print('to the log'); sys.exit(3)\n"
    )
    pod = sync_pod(
        "sec-sync-0",
        "sec-workspace",
        ["python", "-c", program, "/workspace/generations"],
        env=[{"name": "GIT_USER", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "username"}}}],
        envFrom=[{"secretRef": {"name": "creds"}}],
        mounts=[
            {"name": "source-secret", "mountPath": "/var/run/secrets/torchrun.ai/source", "readOnly": True}
        ],
        volumes=[{"name": "source-secret", "secret": {"secretName": "creds"}}],
    )
    cluster.apply([secret, claim("sec-workspace"), pod], namespace)
    path = volume_dir(cluster, namespace, "sec-workspace")

    got = wait_phase(cluster, namespace, "sec-sync-0", "Succeeded", "Failed")
    term = terminated(got)
    assert (got["status"]["phase"], term["exitCode"], term["reason"]) == ("Failed", 3, "Error")
    seen = json.loads(term["message"])
    assert seen == {"user": "u", "password": "p", "file": "u", "arg": str(path / "generations")}
    assert cluster.kubectl("logs", "-n", namespace, "sec-sync-0").stdout == "to the log\n"


def test_worker_pods_have_logs(cluster: Cluster, namespace: str) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "template": {
                "metadata": {"labels": {"torchrun.ai/role": "worker"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
            },
        },
    }
    cluster.apply(job, namespace)
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "chatty",
            "labels": {"torchrun.ai/role": "worker"},
            "annotations": {"kwok.torchrun.ai/logs": "epoch 1 loss 0.9\nepoch 2 loss 0.5"},
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    cluster.apply(plain, namespace)

    def logs(pod: str, *flags: str) -> str | None:
        got = cluster.kubectl("logs", "-n", namespace, pod, *flags, check=False)
        return got.stdout if got.returncode == 0 and got.stdout else None

    assert (
        wait_until(lambda: logs("chatty"), 60, message="logs of chatty")
        == "epoch 1 loss 0.9\nepoch 2 loss 0.5\n"
    )
    assert logs("chatty", "--tail=1") == "epoch 2 loss 0.5\n"
    try:  # following works, and (as on any kwok pod) never ends by itself
        kubectl_bytes(cluster, "logs", "-f", "-n", namespace, "chatty", timeout=3)
        raise AssertionError("kubectl logs -f ended by itself")
    except subprocess.TimeoutExpired as followed:
        assert followed.stdout == b"epoch 1 loss 0.9\nepoch 2 loss 0.5\n"
    pods = cluster.get("pods", "-n", namespace, "-l", "job-name=train")["items"]
    for p in pods:
        index = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        line = wait_until(lambda name=p["metadata"]["name"]: logs(name), 60, message="worker logs")
        assert f"{namespace}/{p['metadata']['name']}" in line and f"completion index {index}" in line


def test_deleting_a_sync_pod_stops_its_process(cluster: Cluster, namespace: str) -> None:
    token = f"testbed-{uuid.uuid4().hex}"
    sleeper = ["python", "-c", "import time; time.sleep(600)", token]
    cluster.apply([claim("del-workspace"), sync_pod("del-sync-0", "del-workspace", sleeper)], namespace)
    wait_phase(cluster, namespace, "del-sync-0", "Running")
    wait_until(lambda: processes_with(token), 30, message="the sync process")
    cluster.kubectl("delete", "pod", "del-sync-0", "-n", namespace, "--wait=true")
    wait_until(lambda: not processes_with(token), 30, message="the sync process stopped")


def test_a_sync_pod_made_again_under_its_name_runs_again(cluster: Cluster, namespace: str) -> None:
    """A new pod with an old pod's name (a retried sync) gets its own process, Exec and logs."""
    for word in ("first", "second"):
        say = ["python", "-c", f"print('{word}')"]
        cluster.apply([claim("again-workspace"), sync_pod("again-sync-0", "again-workspace", say)], namespace)
        got = wait_phase(cluster, namespace, "again-sync-0", "Succeeded", "Failed")
        assert got["status"]["phase"] == "Succeeded", terminated(got)
        assert cluster.kubectl("logs", "-n", namespace, "again-sync-0").stdout == f"{word}\n"
        execs = cluster.get("execs.kwok.x-k8s.io", "again-sync-0", "-n", namespace)
        assert [o["uid"] for o in execs["metadata"]["ownerReferences"]] == [got["metadata"]["uid"]]
        cluster.kubectl("delete", "pod", "again-sync-0", "-n", namespace, "--wait=true")


# -- lifecycle (last: it restarts the session's control plane) --------------------------------------


def test_down_leaves_no_agent_process_and_up_reports_the_lost_container(
    cluster: Cluster, namespace: str
) -> None:
    token = f"testbed-{uuid.uuid4().hex}"
    sleeper = ["python", "-c", "import sys, time; time.sleep(600)", token]
    cluster.apply([claim("long-workspace"), sync_pod("long-sync-0", "long-workspace", sleeper)], namespace)
    wait_phase(cluster, namespace, "long-sync-0", "Running")
    wait_until(lambda: processes_with(token), 30, message="the sync process")
    exec_token = f"{token}-exec"
    kubectl_exec = subprocess.Popen(
        [str(cluster.kubectl_path), "--kubeconfig", str(cluster.kubeconfig), "exec", "-i", "-n", namespace,
         "long-sync-0", "--", "python", "-c", "import time; time.sleep(600)", exec_token],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: processes_with(exec_token, but=kubectl_exec.pid), 30, message="the exec'd process")
        agent = int((cluster.run_dir / "pids" / "node-agent.pid").read_text())

        cluster.controlplane("down")
        # the sync process and the exec'd one both carry `token`; the kubectl client is not ours
        left = {
            pid
            for pid in [agent, *processes_with(token, but=kubectl_exec.pid)]
            if Path(f"/proc/{pid}").exists()
        }
        assert not left, f"processes left behind by down: {left}"
        assert not (cluster.run_dir / "pids" / "node-agent.pid").exists()
    finally:
        kubectl_exec.kill()
        kubectl_exec.wait()
        cluster.controlplane("up")

    got = wait_phase(cluster, namespace, "long-sync-0", "Failed")
    term = terminated(got)
    assert (term["exitCode"], term["reason"]) == (137, "ContainerStatusUnknown")
    assert "restarted" in term["message"]
