"""`kubectl torchrun` as a researcher uses it: the real console script against the real control
plane, with the real controller program running for the test's namespace.

The upload travels through the kube-apiserver's pods/exec endpoint into the sync program, which
the test bed's node agent runs as a local process for the kwok sync pod, writing into the
hostPath volume that stands for the workspace PVC — so the extracted tree is checked on that
volume. Worker logs are CRI files the node agent writes and kwok serves through the API server.
"""

from __future__ import annotations

import dataclasses
import io
import json
import random
import re
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import pytest
import yaml
from plugincli import PLUGIN, Run, plugin_env
from testbed import Cluster, wait_until

from controller.plugin.archive import write_archive
from controller.plugin.delta import tree_manifest
from controller.plugin.errors import PluginError
from controller.plugin.hotreload import next_generation
from controller.plugin.kube import Kube, load_target
from controller.plugin.objects import get_pod
from controller.plugin.pack import scan
from controller.plugin.upload import upload
from controller.plugin.workspace import _sync_pod_running as sync_pod_running
from controller.sync.limits import Limits
from controller.sync.manifest import ManifestEntry, manifest_of

SHA_PREFIX = "sha256 "


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


PROJECT = {
    "train.py": "print('training')\n",
    "pkg/model.py": "W = 1\n",
    ".gitignore": "*.ckpt\n",
    "last.ckpt": "big weights\n",
    "pkg/__pycache__/model.cpython-311.pyc": "junk",
}
PACKED = {".gitignore", "train.py", "pkg/model.py"}


def make_queue(
    cluster: Cluster, name: str, outcome: str = "run", duration: str = "1s", **annotations: str
) -> str:
    """An 8-GPU queue allowing env overrides, whose kwok worker pods end as `outcome`."""
    pod_annotations = {
        "kwok.torchrun.ai/outcome": outcome,
        "kwok.torchrun.ai/duration": duration,
        **annotations,
    }
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": {"name": name},
            "spec": {
                "nodeResources": {"gpus": 8, "cpus": "90", "memory": "900Gi"},
                "image": "pytorch/pytorch:2.4.0",
                "podAnnotations": pod_annotations,
                "allowOverrides": ["env"],
            },
        }
    )
    return name


@pytest.fixture
def queue(cluster: Cluster, namespace: str) -> Any:
    made: list[str] = []

    def make(outcome: str = "run", duration: str = "1s", **annotations: str) -> str:
        made.append(make_queue(cluster, f"q-{namespace}-{len(made)}", outcome, duration, **annotations))
        return made[-1]

    yield make
    for name in made:
        cluster.kubectl("delete", "torchrunqueue", name, "--ignore-not-found", "--wait=false")


def tj(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.get("torchrunjob", name, "-n", ns)


def phase(cluster: Cluster, ns: str, name: str) -> str:
    return str(tj(cluster, ns, name).get("status", {}).get("phase", ""))


def workspace_volume(cluster: Cluster, ns: str, job: str) -> Path:
    """The directory standing for the job's workspace PVC (the test bed's hostPath PV)."""
    pvc = cluster.get("pvc", f"{job}-workspace", "-n", ns)
    pv = cluster.get("pv", pvc["spec"]["volumeName"])
    return Path(pv["spec"]["hostPath"]["path"])


def worker_pods(cluster: Cluster, ns: str, job: str) -> list[dict[str, Any]]:
    selector = f"torchrun-job-name={job},torchrun.ai/role=worker"
    items: list[dict[str, Any]] = cluster.get("pods", "-n", ns, "-l", selector)["items"]
    return items


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The error a failed command printed: one `error:` line, the last, and no traceback (progress
    lines such as `packed ...` may come before it)."""
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == lines[-1:] and "Traceback" not in proc.stderr, proc.stderr
    return lines[-1]


def dry_run_sha(plugin: Run) -> str:
    out = plugin("submit", "--queue", "any", "--nodes", "1", "--dry-run", "python train.py").stdout
    return out.rsplit(SHA_PREFIX, 1)[1].strip()


# --- no upload needed -------------------------------------------------------------------------


def test_dry_run_prints_a_manifest_the_api_server_accepts_and_sends_nothing(
    cluster: Cluster, namespace: str, e2e_crds: Path, project: Path, plugin: Run
) -> None:
    write(project, PROJECT)
    proc = plugin(
        "submit",
        "--queue",
        "q",
        "--gpus",
        "16",
        "--env",
        "LR=0.1",
        "--dry-run",
        "--",
        "python",
        "train.py",
        "--msg",
        "a b",
    )
    assert proc.returncode == 0, proc.stderr
    manifest_text, listing = proc.stdout.split("\n---\n")
    manifest = yaml.safe_load(manifest_text)
    assert manifest["spec"]["command"] == "python train.py --msg 'a b'"
    assert manifest["spec"]["overrides"] == {"env": [{"name": "LR", "value": "0.1"}]}
    assert {line.split()[-1] for line in listing.splitlines()[:-2]} == PACKED
    accepted = cluster.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-", input=yaml.safe_dump(manifest)
    )
    assert json.loads(accepted.stdout)["metadata"]["name"].startswith("my-project-")
    assert cluster.get("torchrunjobs", "-n", namespace)["items"] == []


def test_every_error_is_one_line_and_a_non_zero_exit(
    cluster: Cluster, namespace: str, e2e_crds: Path, project: Path, plugin: Run, queue: Any
) -> None:
    write(project, {"train.py": "print(1)\n"})
    missing = plugin("list", env=plugin_env(cluster, KUBECONFIG=str(project / "nope")))
    assert (
        one_line_error(missing) == f"error: no kubeconfig: KUBECONFIG={project / 'nope'} has no file; "
        "set KUBECONFIG or pass --kubeconfig"
    )

    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    (project.parent / "down.kubeconfig").write_text(yaml.safe_dump(config))
    down = plugin("list", env=plugin_env(cluster, KUBECONFIG=str(project.parent / "down.kubeconfig")))
    assert (
        one_line_error(down)
        == "error: cannot reach the API server at https://127.0.0.1:1: connection refused"
    )

    unknown = plugin("submit", "--queue", "no-such-queue", "--nodes", "1", "python train.py")
    assert (
        one_line_error(unknown)
        == 'error: queue "no-such-queue" not found (kubectl get torchrunqueues lists the queues)'
    )
    for command in (
        ("status", "ghost"),
        ("logs", "ghost"),
        ("sync", "ghost"),
        ("suspend", "ghost"),
        ("delete", "ghost"),
    ):
        assert one_line_error(plugin(*command)) == (
            f'error: job "ghost" not found in namespace "{namespace}" (kubectl torchrun list shows the jobs)'
        )

    q = queue()
    refused = plugin("submit", "--queue", q, "--gpus", "9000", "python train.py")
    assert one_line_error(refused).startswith(
        "error: the API server refused it: spec.numGPUs: Invalid value: 9000"
    )
    assert cluster.get("torchrunjobs", "-n", namespace)["items"] == []


def test_list_status_suspend_resume_delete_act_on_real_objects(
    cluster: Cluster, namespace: str, controller: Any, plugin: Run, queue: Any
) -> None:
    q = queue()
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": "mnist"},
            "spec": {
                "jobQueue": q,
                "numNodes": 2,
                "command": "python train.py",
                "workspace": {"source": "none"},
            },
        },
        namespace,
    )
    wait_until(lambda: phase(cluster, namespace, "mnist") == "Running", 90, message="mnist Running")

    listing = plugin("list")
    assert listing.returncode == 0, listing.stderr
    header, row = listing.stdout.splitlines()
    assert header.split() == [
        "NAME",
        "QUEUE",
        "NODES",
        "GPUS",
        "PHASE",
        "RESTARTS",
        "PROGRESS",
        "GOODPUT",
        "AGE",
    ]
    assert row.split()[:6] == ["mnist", q, "2", "16", "Running", "0"]

    status = plugin("status", "mnist")
    assert status.returncode == 0, status.stderr
    assert "Phase:      Running" in status.stdout
    assert "Admitted" in status.stdout and "AllWorkersRunning" in status.stdout
    worker_lines = [line for line in status.stdout.splitlines() if line.startswith("  mnist-")]
    assert len(worker_lines) == 2 and all("gpu-node-" in line and "Running" in line for line in worker_lines)

    assert plugin("suspend", "mnist").stdout == "job mnist suspended\n"
    assert tj(cluster, namespace, "mnist")["spec"]["suspend"] is True
    wait_until(lambda: phase(cluster, namespace, "mnist") == "Suspended", 60, message="Suspended")
    wait_until(lambda: not worker_pods(cluster, namespace, "mnist"), 60, message="pods removed")
    assert plugin("resume", "mnist").stdout == "job mnist resumed\n"
    wait_until(lambda: phase(cluster, namespace, "mnist") == "Running", 90, message="Running again")

    assert plugin("delete", "mnist").stdout == "job mnist deleted\n"
    wait_until(lambda: not cluster.get("torchrunjobs", "-n", namespace)["items"], 60, message="job deleted")


# --- uploads through exec -----------------------------------------------------------------------


def test_submit_uploads_through_exec_follows_rank_0_and_exits_with_the_outcome(
    cluster: Cluster, namespace: str, controller: Any, project: Path, plugin: Run, queue: Any
) -> None:
    write(project, PROJECT)
    q = queue("succeed", "4s", **{"kwok.torchrun.ai/logs": "epoch 1 loss 0.5\nepoch 2 loss 0.25"})
    expected_sha = dry_run_sha(plugin)
    proc = plugin(
        "submit",
        "--queue",
        q,
        "--nodes",
        "2",
        "--name",
        "train",
        "--env",
        "LR=0.1",
        "python train.py",
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["epoch 1 loss 0.5", "epoch 2 loss 0.25"]  # rank 0, unprefixed
    assert "created job train" in proc.stderr and "uploading 3 files" in proc.stderr
    assert proc.stderr.strip().endswith("job train succeeded")

    job = tj(cluster, namespace, "train")
    assert job["spec"]["workspace"]["source"] == "upload"
    assert job["spec"]["overrides"]["env"] == [{"name": "LR", "value": "0.1"}]
    assert (job["status"]["workspaceGeneration"], job["status"]["workspaceSha256"]) == (0, expected_sha)
    tree = workspace_volume(cluster, namespace, "train") / "generations" / "0"
    extracted = {
        str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file() and p.name != ".sync_success"
    }
    assert extracted == PACKED
    assert (tree / "train.py").read_text() == PROJECT["train.py"]
    assert json.loads((tree / ".sync_success").read_text())["sha256"] == expected_sha


def test_submit_of_a_failing_job_exits_non_zero_with_the_reason(
    cluster: Cluster, namespace: str, controller: Any, project: Path, plugin: Run, queue: Any
) -> None:
    write(project, {"train.py": "raise SystemExit(3)\n"})
    q = queue("fail", "2s", **{"kwok.torchrun.ai/exit-code": "3"})
    proc = plugin("submit", "--queue", q, "--nodes", "1", "--name", "boom", "python train.py", timeout=240)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("job boom failed: ") and tj(cluster, namespace, "boom")["status"]["phase"] == "Failed"
    )


def test_sync_of_the_same_tree_sends_nothing_and_a_change_rolls_the_workers(
    cluster: Cluster, namespace: str, controller: Any, project: Path, plugin: Run, queue: Any
) -> None:
    write(project, PROJECT)
    q = queue("run")
    detached = plugin(
        "submit", "--queue", q, "--nodes", "2", "--name", "train", "--detach", "python train.py"
    )
    assert detached.returncode == 0, detached.stderr
    wait_until(lambda: phase(cluster, namespace, "train") == "Running", 90, message="Running")
    before = {p["metadata"]["uid"] for p in worker_pods(cluster, namespace, "train")}

    same = plugin("sync", "train")
    assert same.returncode == 0, same.stderr
    assert same.stderr == "nothing changed: job train already runs this tree (generation 0)\n"
    assert tj(cluster, namespace, "train")["spec"]["workspace"].get("generation", 0) == 0
    assert not cluster.kubectl("get", "pod", "train-sync-1", "-n", namespace, check=False).stdout

    (project / "train.py").write_text("print('training v2')\n")
    changed = plugin("sync", "train", timeout=240)
    assert changed.returncode == 0, changed.stderr
    assert "generation 1 uploaded" in changed.stderr and "job train runs generation 1" in changed.stderr
    job = tj(cluster, namespace, "train")
    assert (job["spec"]["workspace"]["generation"], job["status"]["workspaceGeneration"]) == (1, 1)
    assert job["status"]["workspaceSha256"] == dry_run_sha(plugin)
    tree = workspace_volume(cluster, namespace, "train") / "generations" / "1"
    assert (tree / "train.py").read_text() == "print('training v2')\n"
    wait_until(
        lambda: (
            (uids := {p["metadata"]["uid"] for p in worker_pods(cluster, namespace, "train")})
            and len(uids) == 2
            and not uids & before
        ),
        90,
        message="workers replaced",
    )
    again = plugin("sync", "train")
    assert again.stderr == "nothing changed: job train already runs this tree (generation 1)\n"


def hundred_file_project(root: Path) -> None:
    """100 Python-like files, 5 MB in all (about 50 KB each: lines that do not repeat)."""
    rng = random.Random(7)
    for i in range(100):
        path = root / f"pkg{i // 10}" / f"module_{i:02d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"value_{n} = {rng.random()!r}  # {rng.getrandbits(64):016x}\n" for n in range(1000)]
        path.write_text("".join(lines))


def traffic(stderr: str) -> tuple[int, int]:
    """The bytes a command sent and received through its exec sessions, as it printed them."""
    found = re.findall(r"; (\d+) bytes sent, (\d+) received", stderr)
    assert len(found) == 1, stderr
    return int(found[0][0]), int(found[0][1])


def tree_sent(project: Path) -> list[ManifestEntry]:
    tree = scan(project)
    return list(tree_manifest(tree, write_archive(tree, io.BytesIO())))


def test_sync_after_a_one_line_edit_sends_under_10_kb_each_way_and_publishes_the_edited_tree(
    cluster: Cluster, namespace: str, controller: Any, project: Path, plugin: Run, queue: Any
) -> None:
    """Bytes counted at the plugin's exec stream (every websocket message both ways, the manifest
    included); the new generation on the volume is exactly the edited tree."""
    hundred_file_project(project)
    assert 5_000_000 < sum(p.stat().st_size for p in project.rglob("*.py")) < 5_300_000
    submitted = plugin("submit", "--queue", queue("run"), "--nodes", "2", "--name", "train", "--detach", "x")
    assert submitted.returncode == 0, submitted.stderr
    full_sent, full_received = traffic(submitted.stderr)
    wait_until(lambda: phase(cluster, namespace, "train") == "Running", 90, message="Running")

    edited = project / "pkg4" / "module_42.py"
    lines = edited.read_text().splitlines(keepends=True)
    lines[500] = "value_500 = 0.5  # edited\n"
    edited.write_text("".join(lines))
    started = time.monotonic()
    changed = plugin("sync", "train", timeout=240)
    seconds = time.monotonic() - started
    assert changed.returncode == 0, changed.stderr
    assert "generation 1 uploaded: 1 of 100 files sent, the others kept from generation 0" in changed.stderr
    assert "job train runs generation 1" in changed.stderr
    sent, received = traffic(changed.stderr)
    print(f"\nfull upload {full_sent} B sent, {full_received} B received; "
          f"delta {sent} B sent, {received} B received; sync {seconds:.1f} s")  # fmt: skip
    assert sent < 10_000 and received < 10_000, changed.stderr
    volume = workspace_volume(cluster, namespace, "train")
    assert list(manifest_of(volume / "generations" / "1", Limits())) == tree_sent(project)
    assert tj(cluster, namespace, "train")["status"]["workspaceSha256"] == dry_run_sha(plugin)


def test_a_damaged_or_unmarked_previous_generation_costs_bytes_never_a_wrong_tree(
    cluster: Cluster, namespace: str, controller: Any, project: Path, plugin: Run, queue: Any
) -> None:
    """A file of the newest generation altered on the volume is sent again; a newest generation
    without its marker is no base at all: the whole archive goes, into the same generation."""
    hundred_file_project(project)
    submitted = plugin("submit", "--queue", queue("run"), "--nodes", "1", "--name", "train", "--detach", "x")
    assert submitted.returncode == 0, submitted.stderr
    wait_until(
        lambda: tj(cluster, namespace, "train").get("status", {}).get("workspaceSha256"), 60, message="synced"
    )
    generations = workspace_volume(cluster, namespace, "train") / "generations"
    (generations / "0" / "pkg1" / "module_11.py").write_text("rotten\n")
    (project / "pkg2" / "module_22.py").write_text("edited\n")
    damaged = plugin("sync", "train", "--detach", timeout=240)
    assert damaged.returncode == 0, damaged.stderr
    assert "generation 1 uploaded: 2 of 100 files sent, the others kept from generation 0" in damaged.stderr
    assert list(manifest_of(generations / "1", Limits())) == tree_sent(project)
    wait_until(  # the sync pod of generation 1 is done: the next sync claims generation 2
        lambda: tj(cluster, namespace, "train").get("status", {}).get("workspaceGeneration") == 1,
        60,
        message="generation 1 synced",
    )

    (generations / "1" / ".sync_success").unlink()
    (project / "pkg3" / "module_33.py").write_text("edited again\n")
    unmarked = plugin("sync", "train", timeout=240)
    assert unmarked.returncode == 0, unmarked.stderr
    assert "sending the whole archive: no published generation to start from" in unmarked.stderr
    assert traffic(unmarked.stderr)[0] > 1_000_000
    assert list(manifest_of(generations / "2", Limits())) == tree_sent(project)
    status = tj(cluster, namespace, "train")["status"]
    assert (status["workspaceGeneration"], status["workspaceSha256"]) == (2, dry_run_sha(plugin))


class OutputLines:
    """The lines a running process prints on stdout, read as they come (a thread)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def all(self) -> list[str]:
        """Every line, once the process closed its stdout."""
        self._reader.join(timeout=30)
        assert not self._reader.is_alive(), "stdout still open"
        return list(self.lines)


def cri_line(text: str) -> str:
    return f"{datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')} stdout F {text}\n"


def test_logs_all_follows_every_rank_with_its_prefix_and_stops_when_the_job_ends(
    cluster: Cluster, namespace: str, controller: Any, project: Path, plugin: Run, queue: Any, tmp_path: Path
) -> None:
    write(project, {"train.py": "print(1)\n"})
    q = queue("succeed", "12s", **{"kwok.torchrun.ai/logs": "hello"})
    assert (
        plugin(
            "submit", "--queue", q, "--nodes", "2", "--name", "train", "--detach", "python train.py"
        ).returncode
        == 0
    )
    pods = wait_until(
        lambda: (
            ps
            if len(
                ps := [
                    p
                    for p in worker_pods(cluster, namespace, "train")
                    if p["status"].get("phase") == "Running"
                ]
            )
            == 2
            else None
        ),
        90,
        message="2 workers running",
    )
    errors = tmp_path / "follow.err"
    with errors.open("w") as stderr:
        follow = subprocess.Popen(
            [str(PLUGIN), "-n", namespace, "logs", "train", "--all", "--follow"],
            cwd=project,
            env=plugin_env(cluster),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    printed = OutputLines(follow)
    rank1 = next(
        p for p in pods if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1"
    )
    meta = rank1["metadata"]
    log_file = (
        cluster.run_dir / "node-agent" / "pods" / f"{namespace}_{meta['name']}_{meta['uid']}" / "torchrun.log"
    )
    wait_until(lambda: log_file.exists() and log_file.stat().st_size > 0, 30, message="rank 1 log file")
    # rank 1's history printed: its follow stream is open (one stream per pod, attached once), so
    # a line written only now can reach the output through that stream alone, never as history
    wait_until(lambda: "[rank 1] hello" in printed.lines, 60, message="the follower to print rank 1's log")
    with log_file.open("a") as f:
        f.write(cri_line("written while following"))
    assert follow.wait(timeout=120) == 0, errors.read_text()
    lines = printed.all()
    assert sorted(line.split("] ")[0] + "]" for line in lines if line.endswith("hello")) == [
        "[rank 0]",
        "[rank 1]",
    ]
    assert "[rank 1] written while following" in lines
    assert phase(cluster, namespace, "train") == "Succeeded"

    once = plugin("logs", "train", "--all")
    assert once.returncode == 0 and "[rank 0] hello" in once.stdout.splitlines()
    assert plugin("logs", "train", "--rank", "1").stdout.splitlines()[-1] == "written while following"


def test_a_refused_upload_reports_the_sync_programs_reason_and_sync_retries_it(
    cluster: Cluster, namespace: str, controller: Any, project: Path, plugin: Run, queue: Any
) -> None:
    """The exit code comes back on the exec status channel through the real kube-apiserver; the
    failed generation stays unpublished and `sync` fills the next one."""
    write(project, {"train.py": "print(1)\n"})
    q = queue("run")
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": "train"},
            "spec": {
                "jobQueue": q,
                "numNodes": 1,
                "command": "python train.py",
                "workspace": {"source": "upload"},
            },
        },
        namespace,
    )
    kube = Kube(load_target(str(cluster.kubeconfig), None, namespace))
    wait_until(
        lambda: (get_pod(kube, "train-sync-0") or {}).get("status", {}).get("phase") == "Running",
        60,
        message="train-sync-0 running",
    )
    tree = scan(project)
    path = project.parent / "upload.tar.gz"
    with open(path, "wb") as f:
        good = write_archive(tree, f)
    wrong = dataclasses.replace(good, sha256="0" * 64)
    with pytest.raises(PluginError) as refused:
        upload(kube, "train", 0, wrong, path, lambda _: None)
    assert refused.value.message.startswith("upload failed: ChecksumMismatch: ")
    assert refused.value.message.endswith("the job stays as it was; retry with `kubectl torchrun sync train`")
    assert "workspaceSha256" not in tj(cluster, namespace, "train").get("status", {})

    retried = plugin("sync", "train", timeout=240)
    assert retried.returncode == 0, retried.stderr
    job = tj(cluster, namespace, "train")
    assert (job["spec"]["workspace"]["generation"], job["status"]["workspaceSha256"]) == (1, good.sha256)


def upload_job_without_a_controller(cluster: Cluster, namespace: str) -> None:
    """TorchrunJob `train` (an upload workspace) with no controller running: nothing acts on it."""
    job = {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunJob",
        "metadata": {"name": "train"},
        "spec": {
            "jobQueue": "none",
            "numNodes": 1,
            "command": "python train.py",
            "workspace": {"source": "upload"},
        },
    }
    cluster.apply(job, namespace)


def test_the_plugin_never_uploads_into_a_pod_it_cannot_prove_is_the_jobs_sync_pod(
    cluster: Cluster, e2e_crds: Path, namespace: str
) -> None:
    """A pod named like the job's sync pod (`train-sync-0`) that someone else made — no controller
    owner reference to the TorchrunJob's UID — is refused before any exec, with one line."""
    upload_job_without_a_controller(cluster, namespace)
    decoy = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-sync-0",
            "labels": {"torchrun-job-name": "train", "torchrun.ai/role": "sync"},
        },
        # never placed (no node has the label), so it goes at once with the namespace
        "spec": {
            "containers": [{"name": "sync", "image": "busybox"}],
            "nodeSelector": {"torchrun.ai/none": "x"},
        },
    }
    cluster.apply(decoy, namespace)
    kube = Kube(load_target(str(cluster.kubeconfig), None, namespace))
    current = tj(cluster, namespace, "train")
    with pytest.raises(PluginError) as refused:
        sync_pod_running(kube, current, 0)
    assert "is not this job's sync pod" in refused.value.message
    assert current["metadata"]["uid"] in refused.value.message


def test_submit_f_uploads_into_the_files_job_with_each_flags_field_replaced(
    cluster: Cluster, namespace: str, controller: Any, project: Path, plugin: Run, queue: Any
) -> None:
    """`submit -f job.yaml` plus flags: the job the API server holds is the file's, each flag given
    replacing its field (the lifecycle flags included), and this directory is uploaded into it; a
    value the API server refuses is its message, in one line, and creates nothing."""
    write(project, PROJECT)
    q = queue("succeed", "4s", **{"kwok.torchrun.ai/logs": "epoch 1 loss 0.5"})
    job_file = project.parent / "job.yaml"  # outside the project: not uploaded
    job_file.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "torchrun.ai/v1alpha1",
                "kind": "TorchrunJob",
                "metadata": {"name": "from-file", "labels": {"team": "vision"}},
                "spec": {
                    "jobQueue": "not-this-one",
                    "command": "python old.py",
                    "numNodes": 1,
                    "failurePolicy": {"maxRestarts": 5, "backoffLimitPerNode": 1},
                    "ttlSecondsAfterFinished": 600,
                    "overrides": {"env": [{"name": "A", "value": "1"}]},
                },
            }
        )
    )
    base = ("submit", "-f", str(job_file), "--queue", q)
    refused = plugin(*base, "--min-nodes", "3", "--max-nodes", "2", "python train.py")
    line = one_line_error(refused)
    assert line.startswith("error: the API server refused it: ") and "minNodes must be less than" in line
    assert cluster.get("torchrunjobs", "-n", namespace)["items"] == []

    expected_sha = dry_run_sha(plugin)
    flags = (
        "--max-restarts",
        "2",
        "--min-nodes",
        "1",
        "--max-nodes",
        "3",
        "--deadline",
        "1h",
        "--env",
        "B=2",
    )
    proc = plugin(*base, *flags, "python train.py", timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["epoch 1 loss 0.5"]
    assert "created job from-file" in proc.stderr and "uploading 3 files" in proc.stderr
    assert proc.stderr.strip().endswith("job from-file succeeded")

    job = tj(cluster, namespace, "from-file")
    spec = job["spec"]
    assert job["metadata"]["labels"] == {"team": "vision"}
    assert (spec["jobQueue"], spec["command"], spec["numNodes"]) == (q, "python train.py", 1)
    assert (spec["failurePolicy"]["maxRestarts"], spec["failurePolicy"]["backoffLimitPerNode"]) == (2, 1)
    assert spec["elastic"] == {"minNodes": 1, "maxNodes": 3}
    assert (spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (3600, 600)
    assert spec["overrides"]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert spec["workspace"]["source"] == "upload"
    assert (job["status"]["workspaceGeneration"], job["status"]["workspaceSha256"]) == (0, expected_sha)
    tree = workspace_volume(cluster, namespace, "from-file") / "generations" / "0"
    extracted = {
        str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file() and p.name != ".sync_success"
    }
    assert extracted == PACKED


def test_a_status_write_between_the_read_and_the_claim_does_not_fail_sync(
    cluster: Cluster, e2e_crds: Path, namespace: str
) -> None:
    """The controller writes a job's status at any time; the plugin's claim of the next generation
    (conditional on the job it read) reads it again on the conflict instead of failing the sync."""
    upload_job_without_a_controller(cluster, namespace)
    kube = Kube(load_target(str(cluster.kubeconfig), None, namespace))
    stale = tj(cluster, namespace, "train")
    status = json.dumps({"status": {"phase": "Pending"}})
    cluster.kubectl(
        "patch", "tj", "train", "-n", namespace, "--subresource=status", "--type=merge", "-p", status
    )
    assert next_generation(kube, stale) == 1
    assert tj(cluster, namespace, "train")["spec"]["workspace"]["generation"] == 1
