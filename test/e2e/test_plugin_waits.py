"""What `kubectl torchrun` says while it waits, and when it stops waiting, against the real control
plane: the real console script, the real controller program, kwok's pods and the node agent.

Each test reads the command's status lines (stderr) as they come, so a line is checked against
the cluster at the moment it was printed, not after the fact:
- `sync` says "job X runs generation G" only once the worker pods created after the sync are
  Running, as many as the job has nodes — never while only the old workers exist;
- `logs --previous` prints the log of the pod a rank ran before its current one (worker pods
  never restart a container, so a rank's previous log is its previous pod's);
- `submit` says, one line per change, that its queue is missing, that its claim is not bound
  and that its workers cannot be scheduled, each naming the cause, and goes on once the queue
  is there.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from plugincli import PLUGIN, Run, plugin_env
from testbed import Cluster, controller_program, wait_until

from controller.api import parse_time

WORKERS = "torchrun.ai/role=worker"


class Command:
    """A `kubectl torchrun` command running in the background; its status lines (stderr) are
    read as they arrive, so the test can act between two of them."""

    def __init__(self, cluster: Cluster, namespace: str, project: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(PLUGIN), "-n", namespace, *args],
            cwd=project,
            env=plugin_env(cluster),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._arrived: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._arrived.put(line.rstrip("\n"))
        self._arrived.put(None)

    def until(self, wanted: Callable[[str], bool], timeout: float, what: str) -> str:
        """The first next line for which `wanted` is true; fails on a timeout or the command's end."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._arrived.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no line {what} within {timeout}s; the command said:\n" + "\n".join(self.lines))
            if line is None:
                pytest.fail(
                    f"the command ended (exit {self.proc.wait()}) before {what}:\n" + "\n".join(self.lines)
                )
            self.lines.append(line)
            if wanted(line):
                return line

    def finish(self, timeout: float) -> int:
        """Read the remaining lines; the exit code."""
        code = self.proc.wait(timeout)
        while (line := self._arrived.get(timeout=10)) is not None:
            self.lines.append(line)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


@pytest.fixture
def background(cluster: Cluster, namespace: str, project: Path) -> Iterator[Callable[..., Command]]:
    """`background("submit", ...)`: start a command in the project; stopped when the test ends."""
    started: list[Command] = []

    def start(*args: str) -> Command:
        started.append(Command(cluster, namespace, project, *args))
        return started[-1]

    yield start
    for command in started:
        command.stop()


@pytest.fixture
def cluster_objects(cluster: Cluster) -> Iterator[Callable[[dict[str, Any]], str]]:
    """`make(manifest)`: apply a cluster-scoped object (a queue, a storage class), deleted afterwards."""
    made: list[tuple[str, str]] = []

    def make(manifest: dict[str, Any]) -> str:
        cluster.apply(manifest)
        made.append((manifest["kind"], manifest["metadata"]["name"]))
        return str(manifest["metadata"]["name"])

    yield make
    for kind, name in made:
        cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false")


def queue_manifest(name: str, gpus: int = 8, **spec: Any) -> dict[str, Any]:
    """A queue of 8-GPU nodes (by default) whose kwok workers keep running."""
    return {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunQueue",
        "metadata": {"name": name},
        "spec": {
            "nodeResources": {"gpus": gpus, "cpus": "8", "memory": "64Gi"},
            "image": "pytorch/pytorch:2.4.0",
            "podAnnotations": {"kwok.torchrun.ai/outcome": "run"},
            **spec,
        },
    }


def workers(cluster: Cluster, ns: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", ns, "-l", f"torchrun-job-name={job},{WORKERS}")[
        "items"
    ]
    return items


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def summary(pods: list[dict[str, Any]]) -> list[tuple[str, str, str, bool]]:
    """What a failure message shows of the pods: name, phase, creation time, terminating."""
    return [
        (p["metadata"]["name"], p["status"].get("phase", ""), p["metadata"]["creationTimestamp"],
         bool(p["metadata"].get("deletionTimestamp")))
        for p in pods
    ]  # fmt: skip


def rank(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])


# --- sync -------------------------------------------------------------------------------------


def test_sync_says_the_job_runs_the_new_generation_only_once_new_workers_run_it(
    cluster: Cluster,
    namespace: str,
    controller: Any,
    project: Path,
    plugin: Run,
    background: Callable[..., Command],
    cluster_objects: Callable[[dict[str, Any]], str],
) -> None:
    q = cluster_objects(queue_manifest(f"q-{namespace}"))
    (project / "train.py").write_text("print('v1')\n")
    submitted = plugin(
        "submit", "--queue", q, "--nodes", "2", "--name", "train", "--detach", "python train.py"
    )
    assert submitted.returncode == 0, submitted.stderr
    old = wait_until(
        lambda: len(r := running(workers(cluster, namespace, "train"))) == 2 and r, 90, 0.5, "2 workers"
    )
    old_uids = {p["metadata"]["uid"] for p in old}

    (project / "train.py").write_text("print('v2')\n")
    sync = background("sync", "train")
    said = sync.until(lambda line: line.startswith("job train runs"), 150, "saying the job runs generation 1")
    # checked now, while the line is fresh: what the plugin saw cannot have been undone since
    pods = workers(cluster, namespace, "train")
    synced_at = parse_time(
        cluster.get("torchrunjob", "train", "-n", namespace)["status"]["workspaceSyncTime"]
    )
    new = [
        p
        for p in running(pods)
        if p["metadata"]["uid"] not in old_uids and parse_time(p["metadata"]["creationTimestamp"]) > synced_at
    ]
    assert sorted(map(rank, new)) == ["0", "1"], (said, summary(pods), sync.lines)
    assert re.fullmatch(r"job train runs generation 1; [0-9.]+ s after the command", said), said
    assert sync.finish(30) == 0, sync.lines

    waiting = [line for line in sync.lines if line.startswith("waiting: ")]
    assert "waiting: generation 1: 0/2 worker pods started on it are Running;" in "\n".join(waiting), (
        sync.lines
    )
    assert all(a != b for a, b in pairwise(sync.lines)), f"a line said twice in a row: {sync.lines}"


# --- logs --previous -----------------------------------------------------------------------------


def test_logs_previous_prints_the_log_of_the_pod_a_rank_ran_before_its_current_one(
    cluster: Cluster,
    namespace: str,
    controller: Any,
    plugin: Run,
    cluster_objects: Callable[[dict[str, Any]], str],
) -> None:
    """Rank 1's worker fails with a retriable exit code (the test tells kwok to end it so); the
    worker Job keeps the failed pod and runs a new one for rank 1: that failed pod is rank 1's
    previous log, read as a kubelet serves any ended pod's log."""
    q = cluster_objects(queue_manifest(f"q-{namespace}"))
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": "train"},
            "spec": {
                "jobQueue": q,
                "numNodes": 2,
                "command": "python train.py",
                "workspace": {"source": "none"},
                "failurePolicy": {"retriableExitCodes": [3]},
            },
        },
        namespace,
    )
    first = wait_until(
        lambda: len(r := running(workers(cluster, namespace, "train"))) == 2 and r, 90, 0.5, "2 workers"
    )
    crashed = next(p for p in first if rank(p) == "1")["metadata"]["name"]
    cluster.kubectl(
        "annotate", "pod", crashed, "-n", namespace, "--overwrite",
        "kwok.torchrun.ai/outcome=fail", "kwok.torchrun.ai/exit-code=3",
    )  # fmt: skip
    wait_until(
        lambda: any(
            rank(p) == "1" and p["metadata"]["name"] != crashed
            for p in running(workers(cluster, namespace, "train"))
        ),
        90,
        0.5,
        "rank 1 replaced",
    )
    wait_until(  # retried in place: the job runs on, one retriable failure counted
        lambda: (
            (s := cluster.get("torchrunjob", "train", "-n", namespace)["status"])
            and (s.get("phase"), s.get("retriableFailures")) == ("Running", 1)
        ),
        60,
        0.5,
        "the job Running with 1 retriable failure",
    )

    previous = plugin("logs", "train", "--rank", "1", "--previous")
    assert previous.returncode == 0, previous.stderr
    assert previous.stdout == f"testbed: pod {namespace}/{crashed} (completion index 1) started\n"
    every = plugin("logs", "train", "--all", "-p")
    assert every.stdout == f"[rank 1] testbed: pod {namespace}/{crashed} (completion index 1) started\n"
    none = plugin("logs", "train", "--previous")  # rank 0 never failed
    assert none.returncode == 1 and none.stderr.startswith(
        "error: job train has no previous worker pod for rank 0: "
    ), none.stderr


# --- submit's waits -------------------------------------------------------------------------------


def test_submit_says_its_queue_is_missing_and_goes_on_once_it_is_created(
    cluster: Cluster,
    namespace: str,
    e2e_crds: Path,
    project: Path,
    tmp_path: Path,
    background: Callable[..., Command],
    cluster_objects: Callable[[dict[str, Any]], str],
) -> None:
    """`submit` refuses a queue that does not exist when it starts (a typo); this is the queue
    going away after that check, before the controller admitted the job: the controller starts
    only once the queue is deleted, so the job meets no queue."""
    q = cluster_objects(queue_manifest(f"q-{namespace}"))
    (project / "train.py").write_text("print(1)\n")
    submit = background(
        "submit", "--queue", q, "--nodes", "1", "--name", "train", "--detach", "python train.py"
    )
    submit.until(lambda line: line.startswith("created job train"), 60, "creating the job")
    cluster.kubectl("delete", "torchrunqueue", q)
    with controller_program(cluster.kubeconfig, namespace, tmp_path / "controller.log"):
        missing = submit.until(lambda line: "QueueNotFound" in line, 60, "saying the queue is missing")
        assert missing == (
            f"waiting: Admitted=False QueueNotFound: TorchrunQueue {q} does not exist; "
            "the job starts when it is created"
        )
        cluster_objects(queue_manifest(q))
        submit.until(
            lambda line: line.startswith("generation 0 uploaded"), 90, "uploading once the queue exists"
        )
        assert submit.finish(30) == 0, submit.lines
    assert submit.lines.count(missing) == 1, submit.lines


def test_submit_says_its_workspace_claim_is_not_bound_naming_the_storage_class(
    cluster: Cluster,
    namespace: str,
    e2e_crds: Path,
    project: Path,
    tmp_path: Path,
    background: Callable[..., Command],
    cluster_objects: Callable[[dict[str, Any]], str],
) -> None:
    """A storage class whose provisioner nobody runs: the claim stays Pending, and after the
    controller's `--claim-bind-timeout` the job says ClaimNotBound, quoting the claim's Events."""
    klass = cluster_objects(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": f"nothing-{namespace}"},
            "provisioner": "example.com/provisions-nothing",
            "volumeBindingMode": "Immediate",
        }
    )
    q = cluster_objects(queue_manifest(f"q-{namespace}", storage={"workspace": {"storageClassName": klass}}))
    (project / "train.py").write_text("print(1)\n")
    with controller_program(
        cluster.kubeconfig, namespace, tmp_path / "controller.log", "--claim-bind-timeout", "3"
    ):
        submit = background("submit", "--queue", q, "--nodes", "1", "--name", "train", "python train.py")
        unbound = submit.until(lambda line: "ClaimNotBound" in line, 90, "saying the claim is not bound")
    assert unbound.startswith(
        "waiting: WorkspaceReady=False ClaimNotBound: PVC train-workspace is not bound after 3s"
        f" (storage class {klass}): "
    ), submit.lines
    assert "example.com/provisions-nothing" in unbound  # the binder's Event, quoted
    assert cluster.get("pvc", "train-workspace", "-n", namespace)["status"]["phase"] == "Pending"
    assert not any(line.startswith("uploading") for line in submit.lines)


def test_submit_says_the_scheduler_cannot_place_a_job_too_big_for_the_nodes(
    cluster: Cluster,
    namespace: str,
    controller: Any,
    project: Path,
    background: Callable[..., Command],
    cluster_objects: Callable[[dict[str, Any]], str],
) -> None:
    """Nodes of 16 GPUs on a cluster of 8-GPU nodes: the upload goes through (the sync pod is
    small), then, while following rank 0, submit says why there is nothing to follow."""
    q = cluster_objects(queue_manifest(f"q-{namespace}", gpus=16))
    (project / "train.py").write_text("print(1)\n")
    submit = background("submit", "--queue", q, "--nodes", "1", "--name", "train", "python train.py")
    blocked = submit.until(lambda line: "Unschedulable" in line, 90, "saying the workers cannot be scheduled")
    assert blocked.startswith("waiting: Running=False Unschedulable: pod train-0-"), submit.lines
    assert "Insufficient nvidia.com/gpu" in blocked
    assert "workspace ready; following rank 0 of train until the job ends" in submit.lines
    assert submit.proc.poll() is None  # still waiting, as it should
