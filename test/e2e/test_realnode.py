"""End to end on the real node: real containers, real volumes, a real torchrun world.

Each test runs on a real node with a control plane of its own (test/e2e/realnodes.py,
`TORCHRUN_REAL_NODE=1`: containerd, runc, bridge CNI, a kubelet, CoreDNS), so the session's
control plane and its tests never see it: `realnode-1` for a test marked
`@pytest.mark.real_node(1)` with TORCHRUN_TEST_REAL_NODES=2, else `realnode-0`, the two nodes'
tests then on two workers beside each other (test/conftest.py); a node comes up for its first test and
goes down when the module ends. A queue
pinned to the node runs `test/e2e/realnode/train.py` in Debian's torch image: the plugin uploads
the project through `kubectl exec` into the real sync pod, which extracts it into the real PVC; the
workers' init containers copy generation 0 to `/app`; torchrun forms a world of two across the two
pods through the headless Service's DNS; gloo all-reduces and trains. The last test stops its
node and checks that the host is as it was (its links, mounts, cgroups and processes; the
sysctls and host directories once the last node is down); any other node must leave nothing either
(`leftovers`, when the module ends).

Nothing here is skipped: a machine that cannot run the real node (not root, no cgroups, a package
missing) fails the fixture with the control plane's own words.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from plugincli import PLUGIN, plugin_env
from realnodes import (
    HOST_RECORD,
    SYSCTLS,
    RealNode,
    holders,
    host_record,
    host_state,
    leftovers,
    real_node_or_fail,
    run_dir_of,
)
from summary_notes import CHECKPOINT_S3
from testbed import (
    CONTROLPLANE,
    REPO,
    Cluster,
    condition,
    controller_program,
    real_node_index,
    wait_until,
)

from controller.rest import RESTClient, load_config
from controller.rest.resources import PODS
from controller.sync.protocol import sync_pod_name

TRAIN = Path(__file__).parent / "realnode" / "train.py"
TRAIN_CHECKPOINT = Path(__file__).parent / "realnode" / "train_checkpoint.py"
TRAIN_PROGRESS = Path(__file__).parent / "realnode" / "train_progress.py"
HF_TRAINER = Path(__file__).parent / "realnode" / "hf_trainer.py"
LIGHTNING_TRAINER = Path(__file__).parent / "realnode" / "lightning_trainer.py"
RELOAD_LOOP = Path(__file__).parent / "realnode" / "reload_loop.py"
IMAGE_SITECUSTOMIZE = "/usr/lib/python3.13/sitecustomize.py"  # Debian trixie's, in the training image
SHM_PER_GPU = "256Mi"
SHM_BYTES = 256 * 1024 * 1024


class RealNodes:
    """The module's real nodes: each comes up for the first test that runs on it (its `real_node`
    marker, test/conftest.py) and stays up until the module ends; what the host looked like before
    it, and the host-wide record right after it."""

    def __init__(self, stack: ExitStack) -> None:
        self.stack = stack
        self.up: dict[int, RealNode] = {}
        self.before: dict[int, dict[str, Any]] = {}
        self.others_before: dict[int, list[str]] = {}
        self.record: dict[int, dict[str, str]] = {}
        self.failed: dict[int, str] = {}

    def get(self, index: int) -> RealNode:
        """Node `index`, brought up now if it is not yet; a node that could not come up fails each
        of its tests at once with the first try's words (no second try)."""
        if index in self.failed:
            pytest.fail(
                f"realnode-{index} did not come up for an earlier test of this module: {self.failed[index]}"
            )
        if index not in self.up:
            name = f"realnode{index}"
            self.before[index] = host_state(index, run_dir_of(name))
            self.others_before[index] = holders()
            try:
                self.up[index] = self.stack.enter_context(real_node_or_fail(name, index))
            except pytest.fail.Exception as exc:
                self.failed[index] = str(exc)[:2000]
                raise
            self.record[index] = host_record()
        return self.up[index]


@pytest.fixture(scope="module")
def real_nodes() -> Iterator[RealNodes]:
    with ExitStack() as stack:
        yield RealNodes(stack)


@pytest.fixture
def real(real_nodes: RealNodes, request: pytest.FixtureRequest) -> RealNode:
    """The real node this test runs on (`@pytest.mark.real_node(N)`, 0 unmarked), up."""
    return real_nodes.get(real_node_index(request.node))


@pytest.fixture
def namespace(real: RealNode) -> Iterator[str]:
    name = f"rn-{uuid.uuid4().hex[:8]}"
    real.cluster.create_namespace(name)
    yield name
    real.cluster.delete_namespace(name)


@pytest.fixture
def controller(real: RealNode, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """The controller program for this namespace, whose sync pods run the imported controller
    image; yields its log file."""
    log_path = tmp_path / "controller.log"
    sync_image = ("--sync-image", real.images["CONTROLLER_IMAGE"])
    with controller_program(real.cluster.kubeconfig, namespace, log_path, *sync_image):
        yield log_path


@pytest.fixture
def queue(real: RealNode, namespace: str) -> Iterator[str]:
    """A 1-GPU queue pinned to the real node, running Debian's torch as a non-root user."""
    name = f"real-{namespace}"
    real.cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": {"name": name},
            "spec": {
                "nodeResources": {"gpus": 1, "cpus": "700m", "memory": "1536Mi"},
                "image": real.images["TRAIN_IMAGE"],
                "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000},
                "debug": {"stackDumps": True},  # the real node enforces no Pod Security level
                "storage": {
                    "workspace": {"sizePerGPU": "1Gi"},
                    "checkpoints": {"enabled": True, "sizePerGPU": "1Gi"},
                    "shmSizePerGPU": SHM_PER_GPU,
                },
                "scheduling": real.scheduling,
            },
        }
    )
    wait_until(lambda: ready(real.cluster, name), 60, message=f"queue {name} Ready")
    yield name
    real.cluster.kubectl("delete", "torchrunqueue", name, "--ignore-not-found", "--wait=false")


def ready(cluster: Cluster, queue: str) -> bool:
    return (condition(cluster.get("torchrunqueue", queue), "Ready") or {}).get("status") == "True"


def plugin_run(real: RealNode, namespace: str, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl torchrun ARGS` in `project`, as a user would run it."""
    return subprocess.run(
        [str(PLUGIN), "-n", namespace, *args],
        cwd=project,
        env=plugin_env(real.cluster),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def timed_plugin_run(
    real: RealNode, namespace: str, project: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], list[tuple[datetime, str]]]:
    """`plugin_run`, with each line the plugin said on stderr stamped with when it was read."""
    proc = subprocess.Popen(
        [str(PLUGIN), "-n", namespace, *args],
        cwd=project,
        env=plugin_env(real.cluster),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[tuple[datetime, str]] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append((datetime.now(UTC), f"plugin: {line.rstrip()}"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait(timeout=900)
    reader.join(timeout=10)
    err = "".join(text.removeprefix("plugin: ") + "\n" for _, text in said)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), said


def project_with_train(tmp_path: Path, program: Path = TRAIN) -> Path:
    """A project directory holding the training program `program` under its own name."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(program, project / program.name)
    return project


def job_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The TorchrunJob's status as the API server has it now ({} before the first write)."""
    got: dict[str, Any] = cluster.get("torchrunjob", name, "-n", namespace).get("status") or {}
    return got


def pods(cluster: Cluster, ns: str, job: str, role: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get(
        "pods", "-n", ns, "-l", f"torchrun-job-name={job},torchrun.ai/role={role}"
    )["items"]
    return items


def logs(cluster: Cluster, ns: str, pod: str, container: str = "torchrun") -> str:
    return cluster.logs("-n", ns, pod, "-c", container).stdout


def index_of(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])


def volume_dir(cluster: Cluster, ns: str, claim: str) -> Path:
    pvc = cluster.get("pvc", claim, "-n", ns)
    return Path(cluster.get("pv", pvc["spec"]["volumeName"])["spec"]["hostPath"]["path"])


def diagnose(cluster: Cluster, ns: str, job: str) -> str:
    """For a failing test's message: every pod of the job, its containers' states and logs."""
    out = []
    for pod in cluster.get("pods", "-n", ns, "-l", f"torchrun-job-name={job}")["items"]:
        name, status = pod["metadata"]["name"], pod["status"]
        states = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        out.append(f"== {name}: {json.dumps([(s['name'], s.get('state')) for s in states])}")
        for c in [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]:
            got = cluster.logs("-n", ns, name, "-c", c["name"], check=False)
            out.append(f"-- {c['name']}: {(got.stdout + got.stderr)[-1500:]}")
    return "\n".join(out)


def test_a_two_node_job_uploads_syncs_forms_a_world_trains_and_checkpoints(
    real: RealNode, namespace: str, controller: Path, queue: str, tmp_path: Path
) -> None:
    cluster = real.cluster
    project = project_with_train(tmp_path)
    proc = plugin_run(
        real,
        namespace,
        project,
        "submit",
        "--queue",
        queue,
        "--nodes",
        "2",
        "--name",
        "mlp",
        "python train.py",
    )
    assert proc.returncode == 0, f"{proc.stderr}\n{diagnose(cluster, namespace, 'mlp')}"
    assert proc.stderr.strip().endswith("job mlp succeeded"), proc.stderr

    job = cluster.get("torchrunjob", "mlp", "-n", namespace)
    assert job["status"]["phase"] == "Succeeded" and job["status"]["workspaceGeneration"] == 0
    assert (condition(job, "Succeeded") or {}).get("status") == "True", job["status"]

    # the real sync pod ran the controller image on the real node and extracted into the real PVC
    (sync,) = pods(cluster, namespace, "mlp", "sync")
    assert sync["spec"]["nodeName"] == real.name and sync["status"]["phase"] == "Succeeded"
    assert sync["spec"]["containers"][0]["image"] == real.images["CONTROLLER_IMAGE"]
    marker = json.loads(
        (volume_dir(cluster, namespace, "mlp-workspace") / "generations" / "0" / ".sync_success").read_text()
    )
    assert marker["generation"] == 0 and marker["sha256"] == job["status"]["workspaceSha256"]

    # the successPolicy ends the Job when rank 0 succeeds, and the Job controller then deletes a
    # rank still finishing: rank 1's pod is gone when it ended a moment after rank 0 (seen in a
    # full run). Rank 0's log proves both ranks took part (the all-reduce summed 0 + 1)
    workers = sorted(
        (p for p in pods(cluster, namespace, "mlp", "worker") if not p["metadata"].get("deletionTimestamp")),
        key=index_of,
    )
    assert [index_of(p) for p in workers] in ([0], [0, 1]), [p["metadata"]["name"] for p in workers]
    assert {p["spec"]["nodeName"] for p in workers} == {real.name}
    for pod in workers:
        inits = {s["name"]: s for s in pod["status"]["initContainerStatuses"]}
        for name in ("prepare", "workspace"):  # filled /opt/torchrun; found the marker, copied gen 0
            assert inits[name]["state"]["terminated"]["exitCode"] == 0, inits[name]
        out = logs(cluster, namespace, pod["metadata"]["name"])
        rank = index_of(pod)  # one process per node: the node rank is the global rank
        assert f"world rank={rank} size=2 host=mlp-{rank}" in out, out
        assert "allreduce sum=1" in out, out  # both ranks took part
        assert f"shm bytes={SHM_BYTES} cwd=/app file=/app/train.py" in out, out
        assert f"loss rank={rank} step=29 value=" in out, out
    # the plugin followed rank 0 for the user
    assert "world rank=0 size=2" in proc.stdout and "loss rank=0 step=29" in proc.stdout, proc.stdout

    # rank 0 wrote its checkpoint to the checkpoints PVC, on the host's disk
    checkpoints = volume_dir(cluster, namespace, "mlp-checkpoints")
    summary = json.loads((checkpoints / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["params"] == 161
    assert summary["last_loss"] < summary["first_loss"]
    assert (checkpoints / "model.pt").stat().st_size > 0


def node_link(real: RealNode) -> Path:
    """The sysfs directory of the host link that holds the real node's address (its bridge)."""
    node = real.cluster.get("node", real.name)
    (address,) = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    shown = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True, check=True)
    (name,) = [
        link["ifname"]
        for link in json.loads(shown.stdout)
        if any(a.get("local") == address for a in link.get("addr_info") or ())
    ]
    return Path("/sys/class/net") / name


def test_the_address_pods_reach_the_node_by_survives_any_pods_deletion(
    real: RealNode, namespace: str
) -> None:
    """Pods reach the node (the progress endpoint, CoreDNS) at the bridge's address. A Linux bridge
    whose MAC was never set takes its lowest port's, so deleting the pod whose veth gave it moves
    the MAC, and every other pod's ARP entry for the node is wrong until it expires: a hot reload
    took 56.9 s so (2026-11-28: the first sync pod's deletion cut the workers' reports for 46 s).
    `up` sets the bridge's address (addr_assign_type 3, NET_ADDR_SET), which the kernel never
    moves; two pods come and go and it stays."""
    link = node_link(real)
    assert (link / "addr_assign_type").read_text().strip() == "3", "the bridge's MAC is not pinned"
    mac, ports = (link / "address").read_text(), set(os.listdir(link / "brif"))
    names = ("mac-a", "mac-b")
    for name in names:
        real.cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    **real.scheduling,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "pause", "image": real.images["PAUSE_IMAGE"]}],
                },
            }
        )
    wait_until(lambda: len(set(os.listdir(link / "brif")) - ports) == 2, 60, message="both pods' veths")
    assert (link / "address").read_text() == mac
    real.cluster.kubectl("delete", "pod", "-n", namespace, *names, "--wait=true", "--timeout=60s")
    wait_until(lambda: set(os.listdir(link / "brif")) <= ports, 60, message="both veths gone")
    assert (link / "address").read_text() == mac


def test_a_failing_rank_restarts_the_whole_job_for_real_then_fails_at_the_cap(
    real: RealNode, namespace: str, controller: Path, queue: str, tmp_path: Path
) -> None:
    """A job applied as a manifest (one whole-job restart allowed) whose code `kubectl torchrun
    sync` uploads: rank 1 exits 1 after the world formed, in both attempts."""
    cluster = real.cluster
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": "boom"},
            "spec": {
                "jobQueue": queue,
                "numNodes": 2,
                "command": "python train.py --fail-rank 1",
                "distributed": {"backend": "gloo"},
                "workspace": {"source": "upload"},
                "failurePolicy": {"maxRestarts": 1},
            },
        },
        namespace,
    )
    project = project_with_train(tmp_path)
    proc = plugin_run(real, namespace, project, "sync", "boom", "--detach")
    assert proc.returncode == 0, f"{proc.stderr}\n--- controller log ---\n{controller.read_text()[-3000:]}"

    def finished() -> dict[str, Any] | None:
        job = cluster.get("torchrunjob", "boom", "-n", namespace)
        return job if job.get("status", {}).get("phase") in ("Failed", "Succeeded") else None

    job = wait_until(finished, 600, interval=1, message="job boom finished")
    assert job["status"]["phase"] == "Failed" and job["status"]["restarts"] == 1, job["status"]
    failed = condition(job, "Failed") or {}
    assert failed.get("status") == "True" and failed["reason"] == "RestartLimitExceeded", failed
    assert "(whole-job restarts used: 1/1)" in failed["message"], failed

    # the second attempt really ran: both ranks formed the world (their all-reduce summed 0 + 1),
    # then rank 1 exited 1 and rank 0 failed at its next collective. The Job controller fails the
    # Job at the first failed index it sees and deletes the other rank's pod if it is still
    # active, so under load either rank's pod may be the one left (a full run found no rank 1 pod)
    worker_job = cluster.get("job", "boom", "-n", namespace)
    assert worker_job["metadata"]["annotations"]["torchrun.ai/restart"] == "1"
    workers = pods(cluster, namespace, "boom", "worker")
    left = {index_of(p): p for p in workers if not p["metadata"].get("deletionTimestamp")}
    assert left, "no worker pod of the second attempt is left"
    for index, pod in left.items():
        out = logs(cluster, namespace, pod["metadata"]["name"])
        assert f"world rank={index} size=2" in out and "allreduce sum=1" in out, out
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] != 0, terminated
        if index == 1:
            assert "rank 1 fails on purpose" in out and terminated["exitCode"] == 1, (out, terminated)


def checkpoint_queue(
    real: RealNode,
    name: str,
    keep: int,
    progress: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    **checkpoints: Any,
) -> str:
    """The `queue` fixture's queue, with retention (`keep`), other `storage.checkpoints` fields,
    `progress` defaults, `env` beside OMP_NUM_THREADS and a 60 s grace period."""
    spec: dict[str, Any] = {
        "nodeResources": {"gpus": 1, "cpus": "700m", "memory": "1536Mi"},
        "image": real.images["TRAIN_IMAGE"],
        "env": [
            {"name": "OMP_NUM_THREADS", "value": "1"},
            *({"name": k, "value": v} for k, v in (env or {}).items()),
        ],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000},
        "terminationGracePeriodSeconds": 60,
        "storage": {
            "workspace": {"sizePerGPU": "1Gi"},
            "checkpoints": {"enabled": True, "sizePerGPU": "1Gi", "keep": keep, **checkpoints},
            "shmSizePerGPU": SHM_PER_GPU,
        },
        "scheduling": real.scheduling,
    }
    if progress is not None:
        spec["progress"] = progress
    real.cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": {"name": name},
            "spec": spec,
        }
    )
    wait_until(lambda: ready(real.cluster, name), 60, message=f"queue {name} Ready")
    return name


def submit(
    real: RealNode, namespace: str, log: Path, tmp_path: Path, program: Path, name: str, spec: dict[str, Any]
) -> Path:
    """Job `name` (gloo, an uploaded workspace, then `spec`) running `program`, uploaded with
    `kubectl torchrun sync --detach` from a project of its own; returns the project."""
    real.cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": name},
            "spec": {"distributed": {"backend": "gloo"}, "workspace": {"source": "upload"}, **spec},
        },
        namespace,
    )
    (tmp_path / name).mkdir()
    project = project_with_train(tmp_path / name, program)
    # the upload goes into generation 0's sync pod once the controller made it (after the claims);
    # a sync run before that finds no pod waiting for generation 0 and claims generation 1, which
    # the tests that count generations from 0 would not expect (controller/plugin/hotreload.py)
    first = sync_pod_name(name, 0)
    wait_until(lambda: real.cluster.found("pod", first, "-n", namespace), 120, message=f"{first} made")
    proc = plugin_run(real, namespace, project, "sync", name, "--detach")
    assert proc.returncode == 0, f"{proc.stderr}\n--- controller log ---\n{log.read_text()[-3000:]}"
    return project


def losses(path: Path) -> list[tuple[str, int, float]]:
    """`train_checkpoint.py`'s loss file: ("start", from, 0) and ("loss", step, value) in order."""
    out: list[tuple[str, int, float]] = []
    for line in path.read_text().splitlines():
        if line.startswith("# start"):
            out.append(("start", int(line.rsplit("from=", 1)[1]), 0.0))
        else:
            _, step, value = line.split()
            out.append(("loss", int(step), float(value)))
    return out


@pytest.mark.real_node(1)
def test_restarts_and_suspend_resume_from_the_latest_complete_checkpoint(
    real: RealNode, namespace: str, controller: Path, tmp_path: Path
) -> None:
    """k = 4, 36 steps: rank 1 exits 1 after step 2k+1 = 9 of the first attempt → one whole-job
    restart → both ranks resume from step 8; suspended mid-run, the ranks save on SIGTERM; resumed,
    they continue from that step to 36. Retention keeps one complete checkpoint at each start."""
    cluster = real.cluster
    queue = checkpoint_queue(real, f"cp-{namespace}", keep=1)
    command = (
        "python train_checkpoint.py --steps 36 --every 4 --step-seconds 0.7 --fail-rank 1 --fail-after 9"
    )
    spec = {"jobQueue": queue, "numNodes": 2, "command": command, "failurePolicy": {"maxRestarts": 1}}
    project = submit(real, namespace, controller, tmp_path, TRAIN_CHECKPOINT, "resume", spec)

    def status() -> dict[str, Any]:
        return job_status(cluster, namespace, "resume")

    def resumed_at(attempt: int, path: str) -> dict[str, Any] | None:
        cp = status().get("checkpoint") or {}
        return cp if (cp.get("attempt"), cp.get("resumedFrom")) == (attempt, path) else None

    try:
        after_restart = wait_until(lambda: resumed_at(1, "/checkpoints/step-8"), 300, interval=1)
    except AssertionError as e:
        raise AssertionError(
            f"attempt 1 did not resume from step-8: {status()}\n{diagnose(cluster, namespace, 'resume')}"
        ) from e
    assert status()["restarts"] == 1
    assert (after_restart["step"], after_restart["count"], after_restart["pruned"]) == (
        8,
        1,
        1,
    )  # step-4 went

    def rank0_at(step: int) -> bool:
        rank0 = [p for p in pods(cluster, namespace, "resume", "worker") if index_of(p) == 0]
        if not rank0 or rank0[0]["status"].get("phase") != "Running":
            return False
        out = logs(cluster, namespace, rank0[0]["metadata"]["name"])
        return any(f"loss rank=0 step={s} " in out for s in range(step, 37))

    wait_until(lambda: rank0_at(14), 180, interval=1, message="attempt 1 past step 14")
    for pod in pods(cluster, namespace, "resume", "worker"):
        out = logs(cluster, namespace, pod["metadata"]["name"])
        assert "resumed from step 8 (/checkpoints/step-8) attempt=1 in-place=0" in out, out
    cluster.kubectl(
        "patch", "torchrunjob", "resume", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    wait_until(lambda: status().get("phase") == "Suspended", 120, interval=1, message="Suspended")
    wait_until(
        lambda: not pods(cluster, namespace, "resume", "worker"), 120, interval=1, message="workers gone"
    )

    volume = volume_dir(cluster, namespace, "resume-checkpoints")
    stops = sorted(volume.glob("step-*/saved-on-stop"))
    assert len(stops) == 1, sorted(p.name for p in volume.iterdir())
    stopped = int(stops[0].read_text())
    assert (stops[0].parent / ".torchrun_complete").is_file() and stops[0].parent.name == f"step-{stopped}"
    assert 14 <= stopped < 36, stopped

    cluster.kubectl(
        "patch", "torchrunjob", "resume", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}'
    )
    final = wait_until(
        lambda: status() if status().get("phase") in ("Succeeded", "Failed") else None,
        300,
        interval=1,
        message="done",
    )
    assert final["phase"] == "Succeeded", f"{final}\n{diagnose(cluster, namespace, 'resume')}"
    assert final["restarts"] == 1 and final["checkpoint"]["resumedFrom"] == f"/checkpoints/step-{stopped}", (
        final
    )
    assert final["checkpoint"]["count"] == 1  # retention: exactly one complete checkpoint at this start
    for pod in pods(cluster, namespace, "resume", "worker"):
        rank = index_of(pod)
        out = logs(cluster, namespace, pod["metadata"]["name"])
        assert f"resumed from step {stopped} (/checkpoints/step-{stopped})" in out, out
        assert f"loss rank={rank} step={stopped + 1} " in out and "done step=36" in out, out
        assert f"loss rank={rank} step={stopped} " not in out, out  # nothing trained twice
    listed = plugin_run(real, namespace, project, "checkpoints", "resume")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert rows[0][:2] == ["step-36", "36"] and rows[0][-2:] == ["yes", "(marker)"], listed.stdout
    assert f"step-{stopped}" in [r[0] for r in rows], listed.stdout  # kept: pruning happens at starts
    assert all(r[0].startswith("step-") for r in rows), listed.stdout  # the loss files are no checkpoints
    listing_pods = cluster.get("pods", "-n", namespace, "-l", "torchrun.ai/checkpoints-of=resume")["items"]
    assert [p["metadata"].get("deletionTimestamp") is not None for p in listing_pods] in ([], [True])
    said = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=resume")["items"]
    resumed = sorted(e["message"] for e in said if e["reason"] == "ResumedFromCheckpoint")
    assert any("attempt 1 resumed from /checkpoints/step-8 (step 8)" in m for m in resumed), resumed

    # the loss curve continues: rank 0's file, as it was written across the three starts
    seen = losses(volume / "losses-rank0.txt")
    starts = [i for i, (kind, _, _) in enumerate(seen) if kind == "start"]
    assert [seen[i][1] for i in starts] == [0, 8, stopped], seen
    first, second, third = (
        [(s, v) for _, s, v in seen[a + 1 : b]] for a, b in zip(starts, [*starts[1:], len(seen)], strict=True)
    )
    assert [s for s, _ in first] == list(range(1, 10)), first  # rank 1 failed after step 9
    assert [s for s, _ in second] == list(range(9, stopped + 1)), second  # then suspended at `stopped`
    assert [s for s, _ in third] == list(range(stopped + 1, 37)), third
    # step 9 ran twice, from the same weights and data: the same loss (the restart lost nothing)
    assert abs(second[0][1] - first[-1][1]) <= 1e-4 * abs(first[-1][1]), (first, second)
    before = [v for _, v in second[-4:]]
    assert min(before) / 2 <= third[0][1] <= max(before) * 2, (second, third)


@pytest.fixture
def progress_controller(real: RealNode, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """The controller program with its progress endpoint where the real node's pods reach the
    host: the node's address (the bridge's, on this host); --progress-period 5. Yields its log."""
    node = real.cluster.get("node", real.name)
    (address,) = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    port = 19443
    log_path = tmp_path / "controller.log"
    flags = (
        "--sync-image", real.images["CONTROLLER_IMAGE"],
        f"--progress-bind-address={address}:{port}",
        f"--progress-url=https://{address}:{port}/v1/progress",
        "--progress-period=5",
    )  # fmt: skip
    with controller_program(real.cluster.kubeconfig, namespace, log_path, *flags):
        yield log_path


@pytest.mark.real_node(1)
def test_progress_is_reported_a_hung_collective_stalls_restarts_once_and_stack_shows_both_ranks(
    real: RealNode, namespace: str, progress_controller: Path, queue: str, tmp_path: Path
) -> None:
    """`train_progress.py`: 2 gloo ranks report a step a second through `torchrun_progress`; in
    the first attempt both hang in `hang_in_collective` after step 12. status.progress advances;
    the reporter's /metrics (the PodMonitor's target) serves the step; `kubectl torchrun stack`
    shows `hang_in_collective` in both ranks; Progressing=False Stalled comes within
    stallTimeoutSeconds + one period of the last step; onStall Restart restarts the job once and
    the second attempt runs to the last step and succeeds. Rank 0 saves at steps 5 and 20: the
    status of the second attempt shows step-20, saved after its start, as the newest checkpoint."""
    cluster, timeout, period = real.cluster, 30, 5
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": "prog"},
            "spec": {
                "jobQueue": queue,
                "numNodes": 2,
                "command": (
                    "python train_progress.py --steps 30 --step-seconds 1 --hang-after 12 --save-at 5,20"
                ),
                "distributed": {"backend": "gloo"},
                "workspace": {"source": "upload"},
                "failurePolicy": {"maxRestarts": 1},
                "progress": {"stallTimeoutSeconds": timeout, "onStall": "Restart"},
            },
        },
        namespace,
    )
    project = project_with_train(tmp_path, TRAIN_PROGRESS)
    proc = plugin_run(real, namespace, project, "sync", "prog", "--detach")
    assert proc.returncode == 0, f"{proc.stderr}\n{progress_controller.read_text()[-3000:]}"

    def status() -> dict[str, Any]:
        return job_status(cluster, namespace, "prog")

    steps: list[int] = []

    def at_hang() -> dict[str, Any] | None:
        progress = status().get("progress") or {}
        if progress.get("step") is not None and progress["step"] not in steps:
            steps.append(progress["step"])
        return progress if progress.get("step") == 12 else None

    try:
        hung = wait_until(at_hang, 240, interval=0.5, message="status.progress at step 12")
    except AssertionError as e:
        raise AssertionError(
            f"{status()}\n{diagnose(cluster, namespace, 'prog')}\n{progress_controller.read_text()[-3000:]}"
        ) from e
    assert len(steps) >= 2 and steps == sorted(steps), steps  # it advanced while it ran
    assert (hung["totalSteps"], hung["percent"], hung["rank"]) == (30, 40, 0), hung

    workers = sorted(pods(cluster, namespace, "prog", "worker"), key=index_of)
    rank0_ip = workers[0]["status"]["podIP"]
    metrics = subprocess.run(
        ["curl", "-sf", f"http://{rank0_ip}:9400/metrics"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout
    assert 'torchrun_training_step{rank="0"} 12.0' in metrics, metrics

    stack = plugin_run(real, namespace, project, "stack", "prog")
    assert stack.returncode == 0, stack.stdout + stack.stderr
    for rank in (0, 1):
        lines = [line for line in stack.stdout.splitlines() if line.startswith(f"[rank {rank} pid ")]
        assert any("hang_in_collective" in line for line in lines), stack.stdout

    def stalled() -> dict[str, Any] | None:
        job = cluster.get("torchrunjob", "prog", "-n", namespace)
        cond = condition(job, "Progressing") or {}
        return cond if cond.get("reason") == "Stalled" else None

    cond = wait_until(stalled, timeout + 3 * period, interval=0.5, message="Progressing=False Stalled")
    last_step_at = datetime.fromisoformat(hung["updateTime"].replace("Z", "+00:00"))
    stalled_at = datetime.fromisoformat(cond["lastTransitionTime"].replace("Z", "+00:00"))
    # the record's time is the reporter's (to the second), the push up to 2 s late: a little slack
    assert timeout - 1 <= (stalled_at - last_step_at).total_seconds() <= timeout + period + 3, (hung, cond)
    assert "step 12" in cond["message"], cond

    final = wait_until(
        lambda: status() if status().get("phase") in ("Succeeded", "Failed") else None,
        300,
        interval=1,
        message="the restarted job done",
    )
    assert final["phase"] == "Succeeded" and final["restarts"] == 1, (
        f"{final}\n{diagnose(cluster, namespace, 'prog')}"
    )
    assert (final["progress"]["step"], final["progress"]["percent"]) == (30, 100), final["progress"]
    assert (condition({"status": final}, "Progressing") or {}).get("status") == "True", final
    for pod in pods(cluster, namespace, "prog", "worker"):
        out = logs(cluster, namespace, pod["metadata"]["name"])
        assert "attempt=1" in out and "done rank=" in out, out
    # attempt 1's start found step-5 (attempt 0 hung at 12); step-20, saved after that start, is
    # the newest now: rank 0's reporter scanned the volume and told it (progress/saved.py)
    checkpoint = final["checkpoint"]
    assert (checkpoint["attempt"], checkpoint["latest"]) == (1, "/checkpoints/step-5"), checkpoint
    assert (checkpoint["newest"]["name"], checkpoint["newest"]["step"]) == ("step-20", 20), checkpoint
    page = plugin_run(real, namespace, project, "status", "prog").stdout
    assert "Checkpoint: newest step-20 (step 20, saved " in page, page


@dataclass
class S3Server:
    endpoint: str  # as the test reaches it
    pod_endpoint: str  # as the real node's pods reach it: the node's address


@pytest.fixture
def s3_server(real: RealNode, tmp_path: Path) -> Iterator[S3Server]:
    """moto's S3 server (the sync tests' stand-in for Amazon S3) on this host, reachable by the
    real node's pods at the node's address, with an empty bucket `ckpt`."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "moto.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "0.0.0.0", "-p", str(port)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip
    try:
        endpoint = f"http://127.0.0.1:{port}"
        credentials = {"aws_access_key_id": "k", "aws_secret_access_key": "s", "region_name": "us-east-1"}
        client = boto3.client("s3", endpoint_url=endpoint, **credentials)

        def listening() -> bool:
            assert server.poll() is None, log.read_text()[-2000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_until(listening, 60, interval=0.5, message="moto's server")
        client.create_bucket(Bucket="ckpt")
        addresses = real.cluster.get("node", real.name)["status"]["addresses"]
        ip = next(a["address"] for a in addresses if a["type"] == "InternalIP")
        yield S3Server(endpoint, f"http://{ip}:{port}")
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.stand_in(CHECKPOINT_S3)
def test_a_lost_volume_resumes_from_the_s3_mirror(
    real: RealNode, namespace: str, controller: Path, tmp_path: Path, s3_server: S3Server
) -> None:
    """A job on a persisted claim mirrored to S3: rank 1 fails after step 5, the restart mirrors
    step-4 and resumes from it; the job is deleted, the volume's checkpoints too, and the job
    submitted again restores step-4 from S3 and resumes from it."""
    cluster = real.cluster
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3"},
            "stringData": {
                "AWS_ACCESS_KEY_ID": "k",
                "AWS_SECRET_ACCESS_KEY": "s",
                "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": s3_server.pod_endpoint,
            },
        },
        namespace,
    )
    mirror = {"uri": "s3://ckpt/mirror/", "secret": "s3"}
    queue = checkpoint_queue(real, f"s3-{namespace}", keep=2, persist=True, s3=mirror)
    project = project_with_train(tmp_path, TRAIN_CHECKPOINT)

    def run(command: str) -> dict[str, Any]:
        spec = {
            "jobQueue": queue, "numNodes": 2, "command": command, "distributed": {"backend": "gloo"},
            "workspace": {"source": "upload"}, "failurePolicy": {"maxRestarts": 1},
        }  # fmt: skip
        job = {"apiVersion": "torchrun.ai/v1alpha1", "kind": "TorchrunJob", "metadata": {"name": "s3job"}}
        cluster.apply({**job, "spec": spec}, namespace)
        proc = plugin_run(real, namespace, project, "sync", "s3job", "--detach")
        assert proc.returncode == 0, proc.stderr

        def finished() -> dict[str, Any] | None:
            status = job_status(cluster, namespace, "s3job")
            return status if status.get("phase") in ("Succeeded", "Failed") else None

        status = wait_until(finished, 300, interval=1, message="job s3job finished")
        assert status["phase"] == "Succeeded", f"{status}\n{diagnose(cluster, namespace, 's3job')}"
        return status

    first = run("python train_checkpoint.py --steps 8 --every 4 --fail-rank 1 --fail-after 5")
    assert first["restarts"] == 1 and first["checkpoint"]["resumedFrom"] == "/checkpoints/step-4", first
    assert first["checkpoint"]["mirrored"] == 1, first  # the restart's start uploaded step-4
    client = boto3.client(
        "s3",
        endpoint_url=s3_server.endpoint,
        aws_access_key_id="k",
        aws_secret_access_key="s",
        region_name="us-east-1",
    )
    mine = f"mirror/{namespace}/s3job/persisted/"  # the job's own sub-prefix: its claim persists
    keys = {o["Key"] for o in client.list_objects_v2(Bucket="ckpt", Prefix="mirror/").get("Contents") or ()}
    assert {f"{mine}step-4/model.pt", f"{mine}step-4/.torchrun-mirrored"} <= keys, keys

    cluster.kubectl("delete", "torchrunjob", "s3job", "-n", namespace, "--wait=true")
    wait_until(
        lambda: not pods(cluster, namespace, "s3job", "worker"), 120, message="the first run's pods gone"
    )
    volume = volume_dir(cluster, namespace, "s3job-checkpoints")
    for entry in volume.glob("step-*"):
        shutil.rmtree(entry)  # the volume lost its checkpoints

    second = run("python train_checkpoint.py --steps 8 --every 4")
    # the volume was emptied: step-4 can only have come from S3 (`downloaded` names it unless rank 1
    # had restored it before rank 0's prepare looked: docs/checkpoints.md)
    assert second["restarts"] == 0 and second["checkpoint"]["resumedFrom"] == "/checkpoints/step-4", second
    assert second["checkpoint"].get("downloaded") in ("step-4", None), second
    for pod in pods(cluster, namespace, "s3job", "worker"):
        out = logs(cluster, namespace, pod["metadata"]["name"])
        assert "resumed from step 4 (/checkpoints/step-4) attempt=0" in out and "done step=8" in out, out


def readme_snippet(first_line: str) -> str:
    """The README's ```python block that starts with `first_line`, verbatim."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    found = [b for b in blocks if b.startswith(first_line)]
    assert len(found) == 1, f"README has {len(found)} python blocks starting {first_line!r}"
    return found[0]


# The README's two snippets in a small program: the checkpoint loop verbatim at top level; the
# progress snippet's import and report line verbatim inside `train_one_step`, which is what its
# loop body stands for. The prelude gives the names the snippets leave to the user (model,
# train_one_step, total_steps, every) and rank 1 of the first attempt exits 1 after step 25.
README_PROGRAM = """\
import os, sys, time
import torch, torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
total_steps, every = 40, 10
first_attempt = os.environ.get("TORCHRUN_ATTEMPT") == "0"


def train_one_step(model, step):
    x = torch.full((8, 4), step / total_steps)  # the data is a function of the step
    loss = ((model(x) - 1.0) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.05 * p.grad
            p.grad = None
    print(f"step={{step}} rank={{dist.get_rank()}} loss={{loss.item():.6f}}", flush=True)
    if first_attempt and step == 25 and dist.get_rank() == 1:
        os._exit(1)
    time.sleep(0.2)
{progress_import}
{progress_report}
    return loss.detach()


{checkpoint}
print(f"done rank={{dist.get_rank()}}", flush=True)
"""


def test_the_readme_example_runs_as_written_crashes_and_resumes(
    real: RealNode, namespace: str, progress_controller: Path, queue: str, tmp_path: Path
) -> None:
    """The README's example run, as a new user does it: its two snippets (checkpoints and
    progress) in a program, `kubectl torchrun submit --max-restarts 1`, rank 1 crashes after step
    25 of the first attempt → one whole-job restart → both ranks resume from step-20 and finish,
    with progress and the newest checkpoint in the status."""
    cluster = real.cluster
    checkpoint = readme_snippet("import torch, torch.distributed as dist, torchrun_checkpoint as ckpt")
    progress = readme_snippet("import torchrun_progress").splitlines()
    report = [line for line in progress if "torchrun_progress.report(" in line]
    assert progress[0] == "import torchrun_progress" + progress[0][len("import torchrun_progress") :]
    assert len(report) == 1, progress
    program = README_PROGRAM.format(
        progress_import="    " + progress[0].split("#")[0].strip(),
        progress_report="    " + report[0].strip(),
        checkpoint=checkpoint,
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(program)
    proc = plugin_run(
        real, namespace, project, "submit", "--queue", queue, "--nodes", "2", "--name", "readme",
        "--max-restarts", "1", "--detach", "python train.py",
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stderr}\n{program}"

    def status() -> dict[str, Any]:
        return job_status(cluster, namespace, "readme")

    try:
        final = wait_until(
            lambda: status() if status().get("phase") in ("Succeeded", "Failed") else None, 420, interval=1
        )
    except AssertionError as e:
        raise AssertionError(f"{status()}\n{diagnose(cluster, namespace, 'readme')}") from e
    assert final["phase"] == "Succeeded" and final["restarts"] == 1, (
        f"{final}\n{diagnose(cluster, namespace, 'readme')}\n{program}"
    )
    assert final["checkpoint"]["attempt"] == 1, final["checkpoint"]
    assert final["checkpoint"]["resumedFrom"] == "/checkpoints/step-20", final["checkpoint"]
    assert final["checkpoint"]["newest"]["name"] == "step-40", final["checkpoint"]
    assert (final["progress"]["step"], final["progress"]["totalSteps"]) == (40, 40), final["progress"]
    for pod in pods(cluster, namespace, "readme", "worker"):
        rank = index_of(pod)
        out = logs(cluster, namespace, pod["metadata"]["name"])
        steps = [int(m) for m in re.findall(rf"step=(\d+) rank={rank} ", out)]
        assert steps == list(range(21, 41)), out  # resumed after step-20, to the end
        assert f"done rank={rank}" in out, out


def starting_queue(real: RealNode, name: str, **spec: Any) -> str:
    """A small CPU-only queue pinned to the real node (the `queue` fixture's scheduling), `spec`
    over the defaults — which leave `securityContext` to the queue's default (runAsNonRoot)."""
    real.cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": {"name": name},
            "spec": {
                "nodeResources": {"gpus": 0, "cpus": "200m", "memory": "512Mi"},
                "image": real.images["TRAIN_IMAGE"],
                "storage": {"workspace": {"enabled": False}},
                "scheduling": real.scheduling,
                **spec,
            },
        }
    )
    wait_until(lambda: ready(real.cluster, name), 60, message=f"queue {name} Ready")
    return name


def test_a_job_whose_workers_cannot_start_says_why_in_the_kubelets_words(
    real: RealNode, namespace: str, controller: Path, tmp_path: Path
) -> None:
    """Three jobs the kubelet cannot start, side by side: the training image runs as root under
    the queue's default `runAsNonRoot`, an image that is not there, and an env var from a ConfigMap
    that does not exist. Each job's `Running` condition names the kubelet's reason and words at
    the next status write (no resync: the controller's resync is minutes), and `kubectl torchrun
    status` says it on the line after the phase."""
    cluster, suffix = real.cluster, namespace[-8:]
    env = [{"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "missing-cfg", "key": "k"}}}]
    queues = {
        "root": starting_queue(real, f"root-{suffix}"),
        "nopull": starting_queue(real, f"nopull-{suffix}", image="localhost:1/torchrun-missing:0"),
        "nocfg": starting_queue(
            real, f"nocfg-{suffix}", env=env, securityContext={"runAsNonRoot": True, "runAsUser": 1000}
        ),
    }
    expected = {
        "root": ("ContainerConfigError", "will run as root"),
        "nopull": ("ImagePullFailed", "localhost:1/torchrun-missing:0"),
        "nocfg": ("ContainerConfigError", 'configmap "missing-cfg" not found'),
    }
    try:
        for name, queue in queues.items():
            spec = {
                "jobQueue": queue,
                "numNodes": 1,
                "command": "python train.py",
                "workspace": {"source": "none"},
            }
            cluster.apply({"apiVersion": "torchrun.ai/v1alpha1", "kind": "TorchrunJob",
                           "metadata": {"name": name}, "spec": spec}, namespace)  # fmt: skip

        def said(name: str) -> dict[str, Any] | None:
            running = condition(cluster.get("torchrunjob", name, "-n", namespace), "Running") or {}
            return running if running.get("reason") == expected[name][0] else None

        for name, (reason, words) in expected.items():
            try:
                running = wait_until(lambda n=name: said(n), 180, interval=1)
            except AssertionError as e:
                got = cluster.get("torchrunjob", name, "-n", namespace).get("status")
                raise AssertionError(
                    f"job {name}: no Running=False {reason}: {got}\n{diagnose(cluster, namespace, name)}"
                    f"\n--- controller log ---\n{controller.read_text()[-3000:]}"
                ) from e
            assert running["status"] == "False" and words in running["message"], running
            assert running["message"].startswith(f"pod {name}-0-"), running
        assert "runAsUser" in (said("root") or {})["message"]  # the one line that fixes it
        page = plugin_run(real, namespace, tmp_path, "status", "nopull")
        lines = page.stdout.splitlines()
        phase_at = next(i for i, line in enumerate(lines) if line.startswith("Phase:"))
        assert lines[phase_at + 1].startswith("Waiting:    Running=False ImagePullFailed: pod nopull-0-"), (
            page
        )
    finally:
        for queue in queues.values():
            cluster.kubectl("delete", "torchrunqueue", queue, "--ignore-not-found", "--wait=false")


# torchrun's own in-place restart is not reliable enough for CI: hack/bench/torchrun_inplace.py
# runs this test IN_PLACE_RUNS times in one real node session, with this `distributed.maxRestarts`.
# On 2026-11-27 (torch 2.6): maxRestarts 1 resumed 4 runs of 5 (in the fifth the survivor's own
# gloo error spent its node's only restart); maxRestarts 3 hung in some runs (`Gloo connectFullMesh
# failed` in a restarted rank, then one node done and the other waiting) — what [recovery] was
# warned of. A test that fails one run in a few would make CI a coin toss; it is defined only when
# the bench asks for it.
IN_PLACE_RUNS = int(os.environ.get("TORCHRUN_IN_PLACE_RUNS", "0"))
# 16 steps of 0.5 s, a checkpoint every 4: rank 1 exits 1 after step 9 of its first workers
CRASH_AFTER_9 = (
    "python train_checkpoint.py --steps 16 --every 4 --step-seconds 0.5 --fail-rank 1 --fail-after 9"
)
IN_PLACE_MAX_RESTARTS = int(os.environ.get("TORCHRUN_IN_PLACE_MAX_RESTARTS", "3"))


def in_place_restart_resumes_from_the_newest_checkpoint_not_the_start_s_choice(
    real: RealNode, namespace: str, controller: Path, tmp_path: Path, run: int
) -> None:
    """`distributed.maxRestarts: 3`: rank 1 exits 1 after step 9; torchrun (torch 2.6) restarts
    both nodes' workers in place — the pods stay, no whole-job restart — and the restarted ranks
    resume from step-8, saved after the pods started (the start chose nothing: the volume was
    empty), because the helper scans again after an in-place restart."""
    cluster = real.cluster
    queue = checkpoint_queue(real, f"ip-{namespace}", keep=20)
    command = CRASH_AFTER_9
    spec = {
        "jobQueue": queue,
        "numNodes": 2,
        "command": command,
        "distributed": {"backend": "gloo", "maxRestarts": IN_PLACE_MAX_RESTARTS},
    }
    submit(real, namespace, controller, tmp_path, TRAIN_CHECKPOINT, "inplace", spec)
    seen: set[str] = set()  # every worker pod's UID while the job runs
    said: dict[str, str] = {}  # rank -> its torchrun log, read while its pod is there

    def done() -> dict[str, Any] | None:
        for pod in pods(cluster, namespace, "inplace", "worker"):
            seen.add(pod["metadata"]["uid"])
            got = cluster.kubectl(
                "logs", "-n", namespace, pod["metadata"]["name"], "-c", "torchrun", check=False
            )
            said[str(index_of(pod))] = got.stdout or said.get(str(index_of(pod)), "")
        st = job_status(cluster, namespace, "inplace")
        return st if st.get("phase") in ("Succeeded", "Failed") else None

    final = wait_until(done, 420, interval=1, message="inplace finished")
    why = f"{final}\n{diagnose(cluster, namespace, 'inplace')}"
    assert final["phase"] == "Succeeded" and not final.get("restarts"), why
    assert len(seen) == 2, (seen, why)  # the same two pods throughout: nothing recreated
    assert final["checkpoint"].get("resumedFrom") is None, final  # the start chose nothing
    for rank, out in said.items():
        resumed = r"resumed from step 8 \(/checkpoints/step-8\) attempt=0 in-place=[1-9]"
        assert re.search(resumed, out) and ("done step=16" in out or rank != "0"), (rank, out)


if IN_PLACE_RUNS:
    test_torchrun_s_in_place_restart_resumes_from_the_newest_checkpoint_not_the_start_s_choice = (
        pytest.mark.parametrize("run", range(IN_PLACE_RUNS))(
            in_place_restart_resumes_from_the_newest_checkpoint_not_the_start_s_choice
        )
    )

# -- restarts in place (failurePolicy.restartMode: InPlace: the supervisor, issue 33) -----------

IN_PLACE_RESTART_RUNS = int(os.environ.get("TORCHRUN_IN_PLACE_RESTART_RUNS", "2"))
RESTART_SECONDS: dict[str, list[float]] = {"InPlace": [], "Recreate": [], "InPlaceNoStandby": []}
# hack/bench/in_place_restart.py --standby-baseline: every other in-place run without the
# supervisors' standby torchrun (TORCHRUN_STANDBY=0 in the queue's env), timed apart
STANDBY_BASELINE = os.environ.get("TORCHRUN_BENCH_STANDBY") == "alternate"
CRASH_LINE = "rank 1 fails on purpose after step 9"


def _log_time(stamp: str) -> datetime:
    """A `kubectl logs --timestamps` time (RFC 3339, nanoseconds, trailing zeros trimmed)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{whole}.{(fraction + '000000')[:6]}+00:00")


class TimedLogs:
    """Every worker pod's torchrun log with the runtime's timestamps, the longest seen per pod UID,
    collected while the pods exist (a recreate deletes them and their logs). A read that failed
    keeps what an earlier one got and is in `errors` (`kubectl logs` goes through the API server to
    the kubelet, and a loaded machine can time it out)."""

    def __init__(self, cluster: Cluster, ns: str, job: str) -> None:
        self.cluster, self.ns, self.job = cluster, ns, job
        self.text: dict[str, str] = {}
        self.errors: dict[str, str] = {}  # pod name → why its last read failed

    def every_rank_said(self, prefix: str) -> bool:
        """Read the logs again: both ranks printed a line starting with `prefix.format(rank=r)`."""
        self.poll()
        texts = [text for _, text in self.lines()]
        return all(any(t.startswith(prefix.format(rank=r)) for t in texts) for r in (0, 1))

    def poll(self) -> set[str]:
        """Read every worker pod's log again; the UIDs of the pods seen."""
        seen = set()
        for pod in pods(self.cluster, self.ns, self.job, "worker"):
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            got = self.cluster.logs(
                "--timestamps", "-n", self.ns, pod["metadata"]["name"], "-c", "torchrun", check=False
            )
            if got.returncode != 0:
                self.errors[pod["metadata"]["name"]] = got.stderr.strip()
                continue
            self.errors.pop(pod["metadata"]["name"], None)
            if len(got.stdout) > len(self.text.get(uid, "")):
                self.text[uid] = got.stdout
        return seen

    def lines(self) -> list[tuple[datetime, str]]:
        """(time, text) of every line of every pod, in time order."""
        out = []
        for text in self.text.values():
            for line in text.splitlines():
                stamp, _, rest = line.partition(" ")
                if stamp[:4].isdigit():
                    out.append((_log_time(stamp), rest))
        return sorted(out)

    def recovery_seconds(self) -> float:
        """From the crash (rank 1's last words) to the first step a rank trained after the resume
        (the first step-9 loss after a rank said it resumed: rank 0 may print the crashed run's
        step 9 after rank 1's last words)."""
        lines = self.lines()
        crash = next(t for t, text in lines if CRASH_LINE in text)
        resume = next(t for t, text in lines if t > crash and text.startswith("resumed from step 8 "))
        trained = next(t for t, text in lines if t >= resume and re.match(r"loss rank=\d+ step=9 ", text))
        return (trained - crash).total_seconds()

    def timeline(self) -> str:
        """Every line from the crash to the first step after the resume, at its offset (seconds)."""
        lines = self.lines()
        crash = next(t for t, text in lines if CRASH_LINE in text)
        end = crash.timestamp() + self.recovery_seconds()
        return "\n".join(
            f"{t.timestamp() - crash.timestamp():6.2f} {text[:150]}"
            for t, text in lines
            if crash.timestamp() <= t.timestamp() <= end
        )


def crash_job(
    real: RealNode,
    namespace: str,
    log: Path,
    tmp_path: Path,
    name: str,
    mode: str,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], TimedLogs, set[str]]:
    """`train_checkpoint.py`, 16 steps of 0.5 s on 2 nodes, a checkpoint every 4 steps; rank 1 exits
    1 after step 9 of its first workers; `maxRestarts: 1` in restart mode `mode`; `env` in the
    queue's environment. Returns the final status, the pods' timed logs and every worker pod UID seen."""
    queue = checkpoint_queue(real, f"rc-{namespace}", keep=20, env=env)
    command = CRASH_AFTER_9
    spec: dict[str, Any] = {
        "jobQueue": queue,
        "numNodes": 2,
        "command": command,
        "failurePolicy": {"maxRestarts": 1, "restartMode": mode},
    }
    submit(real, namespace, log, tmp_path, TRAIN_CHECKPOINT, name, spec)
    logs, seen = TimedLogs(real.cluster, namespace, name), set()

    def done() -> dict[str, Any] | None:
        seen.update(logs.poll())
        st = job_status(real.cluster, namespace, name)
        return st if st.get("phase") in ("Succeeded", "Failed") else None

    try:
        final = wait_until(done, 420, interval=0.5, message=f"{name} finished")
    except AssertionError as e:
        said = f"{job_status(real.cluster, namespace, name)}\n{diagnose(real.cluster, namespace, name)}"
        raise AssertionError(f"{said}\n{log.read_text()[-4000:]}") from e
    return final, logs, seen


@pytest.mark.parametrize("run", range(IN_PLACE_RESTART_RUNS))
def test_a_crashed_rank_restarts_in_place_in_the_same_pods_and_resumes_from_the_newest_checkpoint(
    real: RealNode, namespace: str, progress_controller: Path, tmp_path: Path, run: int
) -> None:
    """`restartMode: InPlace`: rank 1 exits 1 after step 9 → both supervisors tell the failure →
    the controller names generation 1 → each pod starts a fresh torchrun (rendezvous `<uid>-1`,
    the store hosted by node 0's supervisor) → both ranks resume from step-8, saved after the pods
    started (the helper scans again in generation 1), in the same two pods; the restart is counted
    once, in place, by its reason; step 9's loss is trained again exactly."""
    cluster = real.cluster
    plain = STANDBY_BASELINE and run % 2 == 1
    env = {"TORCHRUN_STANDBY": "0"} if plain else None
    final, logs, seen = crash_job(real, namespace, progress_controller, tmp_path, "ipr", "InPlace", env)
    why = f"{final}\n{diagnose(cluster, namespace, 'ipr')}\n{progress_controller.read_text()[-3000:]}"
    assert final["phase"] == "Succeeded", why
    counted = (final.get("restarts"), final.get("inPlaceRestarts"), final.get("inPlaceGeneration"))
    assert counted == (1, 1, 1) and final.get("restartsByReason") == {"WorkersFailed": 1}, why
    assert len(seen) == 2, (seen, why)  # the same two pods throughout: nothing recreated
    texts = "\n".join(text for _, text in logs.lines())
    assert texts.count("resumed from step 8 (/checkpoints/step-8) attempt=0 in-place=1") == 2, texts
    for rank in (0, 1):
        nine = re.findall(rf"^loss rank={rank} step=9 value=(\S+)$", texts, re.MULTILINE)
        assert len(nine) == 2 and nine[0] == nine[1], (rank, nine)  # step 9 again, from the same state
    assert "done step=16" in texts
    said = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=ipr")["items"]
    restarted = [e["message"] for e in said if e["reason"] == "RestartedInPlace"]
    assert any("restart 1 of 1, in place (generation 1)" in m for m in restarted), restarted
    RESTART_SECONDS["InPlaceNoStandby" if plain else "InPlace"].append(logs.recovery_seconds())
    print(f"in place{' without the standby' if plain else ''}, run {run}: from the crash\n{logs.timeline()}")


def test_the_recreate_path_recovers_from_the_same_crash_measured_beside_it(
    real: RealNode, namespace: str, progress_controller: Path, tmp_path: Path
) -> None:
    """The same crash under `restartMode: Recreate` (the default): a new worker Job, four pods in
    all, both ranks resume from step-8. The time from the crash to the first step after the resume
    is printed beside the in-place runs' of this session (hack/bench/in_place_restart.py)."""
    final, logs, seen = crash_job(real, namespace, progress_controller, tmp_path, "rcr", "Recreate")
    why = f"{final}\n{diagnose(real.cluster, namespace, 'rcr')}"
    assert final["phase"] == "Succeeded" and final.get("restarts") == 1, why
    assert not final.get("inPlaceRestarts") and len(seen) == 4, (seen, why)
    RESTART_SECONDS["Recreate"].append(logs.recovery_seconds())
    in_place = RESTART_SECONDS["InPlace"]
    line = f"crash to the first step after the resume: recreate {RESTART_SECONDS['Recreate'][0]:.1f} s"
    if in_place:
        mean = sum(in_place) / len(in_place)
        line += f", in place {', '.join(f'{s:.1f}' for s in in_place)} s (mean {mean:.1f} s, "
        line += f"{RESTART_SECONDS['Recreate'][0] / mean:.1f}x faster)"
    print(line)
    if out := os.environ.get("TORCHRUN_BENCH_OUT"):
        Path(out).write_text(json.dumps(RESTART_SECONDS) + "\n")


class Evicted:
    """`train_checkpoint.py`, 40 steps of 0.5 s on 2 nodes, a checkpoint every 4 steps, under
    `policy` (`failurePolicy`), submitted as `name`; once every rank trained step 10, node rank
    `rank`'s pod is evicted (what a drain or a lost node gives it: `DisruptionTarget`). Holds the
    first pods by rank, the timed logs, the worker pod UIDs seen, the evicted pod's metadata and
    when it was evicted."""

    def __init__(
        self, real: RealNode, ns: str, log: Path, tmp_path: Path, name: str, policy: dict[str, Any], rank: int
    ) -> None:
        self.cluster, self.ns, self.name = real.cluster, ns, name
        queue = checkpoint_queue(real, f"rc-{ns}", keep=20)
        command = "python train_checkpoint.py --steps 40 --every 4 --step-seconds 0.5"
        spec = {"jobQueue": queue, "numNodes": 2, "command": command, "failurePolicy": policy}
        submit(real, ns, log, tmp_path, TRAIN_CHECKPOINT, name, spec)
        self.logs = TimedLogs(self.cluster, ns, name)
        wait_until(
            lambda: self.logs.every_rank_said("loss rank={rank} step=10 "),
            240,
            interval=0.5,
            message="step 10",
        )
        self.seen = self.logs.poll()
        index = "batch.kubernetes.io/job-completion-index"
        self.first = {p["metadata"]["annotations"][index]: p for p in pods(self.cluster, ns, name, "worker")}
        self.pod = self.first[str(rank)]["metadata"]
        self.at = datetime.now(UTC)
        client = RESTClient(load_config(str(self.cluster.kubeconfig)))
        client.evict(PODS, self.pod["name"], ns, uid=self.pod["uid"])

    def finished(
        self, timeout: float, observe: Callable[[], None] = lambda: None, more: Callable[[], str] = str
    ) -> dict[str, Any]:
        """The job's final status, polling its pods' logs (and `observe`) every 0.5 s meanwhile;
        a timeout says the status, the pods and every line since the eviction (and `more()`)."""

        def done() -> dict[str, Any] | None:
            self.seen.update(self.logs.poll())
            observe()
            st = job_status(self.cluster, self.ns, self.name)
            return st if st.get("phase") in ("Succeeded", "Failed") else None

        try:
            return wait_until(done, timeout, interval=0.5, message=f"{self.name} finished")
        except AssertionError as e:
            lines = self.logs.lines()
            timeline = "\n".join(f"{t.isoformat()} {text[:160]}" for t, text in lines if t > self.at)
            status = job_status(self.cluster, self.ns, self.name)
            said = f"{status}\n{diagnose(self.cluster, self.ns, self.name)}"
            raise AssertionError(f"{said}\n{timeline[-8000:]}\n{more()}") from e


@pytest.mark.real_node(1)
def test_node_0s_pod_lost_is_replaced_and_every_rank_restarts_in_place_into_its_new_store(
    real: RealNode, namespace: str, progress_controller: Path, tmp_path: Path
) -> None:
    """`restartMode: InPlace`, node rank 0's pod evicted mid-run (what a lost node's pods get:
    `DisruptionTarget`, which the worker Job ignores) while rank 1 trains on. Node 0's supervisor
    hosted the c10d store, so the store goes with it: the worker Job makes a new pod for rank 0
    under the same hostname, its supervisor hosts a new store, and every rank starts the next
    generation there — rank 1 in the pod it was in — resuming both from the newest complete
    checkpoint. Rank 1's failed collective may be counted as one restart; the loss itself is not.
    The time from the eviction to the first step after the resume is printed."""
    cluster = real.cluster
    policy = {"maxRestarts": 1, "restartMode": "InPlace"}
    run = Evicted(real, namespace, progress_controller, tmp_path, "lz", policy, rank=0)
    first, logs, seen, evicted, rank0 = run.first, run.logs, run.seen, run.at, run.pod
    final = run.finished(240, more=lambda: progress_controller.read_text()[-4000:])
    why = f"{final}\n{diagnose(cluster, namespace, 'lz')}\n{progress_controller.read_text()[-3000:]}"
    assert final["phase"] == "Succeeded", why
    assert final.get("inPlaceGeneration", 0) >= 1 and (final.get("restarts") or 0) <= 1, why
    now = {p["metadata"]["uid"] for p in pods(cluster, namespace, "lz", "worker")}
    assert first["1"]["metadata"]["uid"] in now and rank0["uid"] not in now, (now, why)  # rank 1 stayed
    assert len(seen) == 3, (seen, why)  # the two first pods and rank 0's replacement
    lines = logs.lines()
    texts = "\n".join(text for _, text in lines)
    resumed = re.findall(r"^resumed from step (\d+) \S+ attempt=0 in-place=(\d+)$", texts, re.MULTILINE)
    assert len(resumed) == 2 and resumed[0] == resumed[1] and int(resumed[0][0]) >= 8, (resumed, texts)
    assert texts.count("done step=40") == 2, texts
    step = int(resumed[0][0]) + 1
    back = next(t for t, text in lines if t > evicted and text.startswith(f"loss rank=0 step={step} "))
    print(
        f"node 0's pod evicted: both ranks resumed from step {step - 1}, stepping again after "
        f"{(back - evicted).total_seconds():.1f} s; status {final.get('restarts')} restart(s), "
        f"generation {final.get('inPlaceGeneration')}"
    )


def test_a_pod_evicted_on_the_recreate_path_is_not_taken_for_a_finished_rank(
    real: RealNode, namespace: str, progress_controller: Path, tmp_path: Path
) -> None:
    """`restartMode: Recreate` (no supervisor: torchrun is the container's process), rank 1's pod
    evicted mid-run. `train_checkpoint.py` saves on SIGTERM and both ranks agree to stop, so both
    programs exit 0: the evicted pod must still not end Succeeded (torchrun answers the SIGTERM
    itself with a non-zero exit), or the worker Job would count rank 1 done. The controller starts
    every rank again at once in a new attempt (`disruption.py`), not counted as a restart; the
    job ends Succeeded with every rank at its last step, resumed from a checkpoint after the
    eviction; the time to that resume is printed."""
    cluster = real.cluster
    phases: dict[str, set[str]] = {}

    def observe() -> None:
        for pod in pods(cluster, namespace, "ev", "worker"):
            phases.setdefault(pod["metadata"]["uid"], set()).add(pod["status"].get("phase", ""))

    run = Evicted(real, namespace, progress_controller, tmp_path, "ev", {"maxRestarts": 2}, rank=1)
    logs, seen, evicted, rank1 = run.logs, run.seen, run.at, run.pod
    final = run.finished(300, observe, lambda: str(phases))
    why = f"{final}\n{diagnose(cluster, namespace, 'ev')}\n{phases}"
    assert final["phase"] == "Succeeded", why
    assert not final.get("restarts") and final.get("disruptions") == 1, why
    # polled every 0.5 s (the worker Job's finalizer keeps a pod until it counted it): the job's
    # outcome below is the proof, this catches a Succeeded phase the poll saw
    assert "Succeeded" not in phases.get(rank1["uid"], set()), why
    lines = logs.lines()
    texts = "\n".join(text for _, text in lines)
    assert texts.count("done step=40") == 2, texts
    resumed = [(t, text) for t, text in lines if t > evicted and text.startswith("resumed from step ")]
    assert len(resumed) >= 2, (resumed, why)
    print(
        f"recreate path, rank 1's pod evicted: {len(seen)} worker pods in all, a new attempt uncounted, "
        f"resumed ({resumed[-1][1]}) {(resumed[-1][0] - evicted).total_seconds():.1f} s after the eviction"
    )


@pytest.mark.real_node(1)
def test_a_hung_collective_stalls_and_restarts_in_place_in_the_same_pods(
    real: RealNode, namespace: str, progress_controller: Path, queue: str, tmp_path: Path
) -> None:
    """`restartMode: InPlace`, `onStall: Restart`: `train_progress.py`'s two ranks hang in a
    collective after step 6 of generation 0 → `Stalled` after `stallTimeoutSeconds` → the
    controller names generation 1 (no process failed: the supervisors stop the hung torchruns,
    SIGKILL past the grace, and start fresh ones) → generation 1 runs all 20 steps in the same two
    pods; the restart is counted once, by `Stalled`, and the new generation's own start is not
    taken for another stall."""
    # 30 s: 20 s was missed once on a loaded 2-core machine while the clock still started when the
    # generation was named (the hung torchruns' 10 s SIGKILL grace counted); it now starts when
    # every rank runs the new one (inplace.restarted_at)
    cluster, timeout = real.cluster, 30
    spec = {
        "jobQueue": queue,
        "numNodes": 2,
        "command": "python train_progress.py --steps 20 --step-seconds 0.5 --hang-after 6",
        "failurePolicy": {"maxRestarts": 1, "restartMode": "InPlace"},
        "progress": {"stallTimeoutSeconds": timeout, "onStall": "Restart"},
    }
    submit(real, namespace, progress_controller, tmp_path, TRAIN_PROGRESS, "ips", spec)
    logs, seen = TimedLogs(cluster, namespace, "ips"), set()

    def done() -> dict[str, Any] | None:
        seen.update(logs.poll())
        st = job_status(cluster, namespace, "ips")
        return st if st.get("phase") in ("Succeeded", "Failed") else None

    final = wait_until(done, 300, interval=0.5, message="ips finished")
    why = f"{final}\n{diagnose(cluster, namespace, 'ips')}\n{progress_controller.read_text()[-3000:]}"
    assert final["phase"] == "Succeeded", why
    counted = (final.get("restarts"), final.get("inPlaceRestarts"), final.get("restartsByReason"))
    assert counted == (1, 1, {"Stalled": 1}) and final.get("inPlaceGeneration") == 1, why
    assert len(seen) == 2, (seen, why)
    texts = "\n".join(text for _, text in logs.lines())
    for rank in (0, 1):
        assert f"hang rank={rank} step=6" in texts and f"done rank={rank} steps=20" in texts, texts
        assert f"world rank={rank} size=2 attempt=0 generation=1" in texts, texts
    said = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=ips")["items"]
    restarted = [e["message"] for e in said if e["reason"] == "RestartedInPlace"]
    assert len(restarted) == 1 and "after: Stalled: no new progress record" in restarted[0], restarted


HOT_RELOAD_RUNS = int(os.environ.get("TORCHRUN_HOT_RELOAD_RUNS", "1"))
HOT_RELOAD_SECONDS: dict[str, list[float]] = {"standby": [], "no standby": []}


def reload_timeline(
    lines: list[tuple[datetime, str]], started: datetime, controller_log: Path, end: datetime
) -> str:
    """Where a hot reload's seconds went, from the command: the controller's log lines about the
    new sync pod and the generation it published, and every supervisor line and first step of the
    new code up to `end`, each as `+seconds what`."""
    said: list[tuple[datetime, str]] = []
    for line in controller_log.read_text().splitlines():
        stamp, _, rest = line.partition(" ")
        if stamp[:4].isdigit() and ("rld-sync-1" in rest or "generation=1" in rest or "status" in rest):
            said.append((datetime.fromisoformat(stamp.replace("Z", "+00:00")), "controller: " + rest[:90]))
    firsts = {}
    for t, text in lines:
        if text.startswith("code v=2 rank="):
            firsts.setdefault(text.split()[2], (t, text))
    said += [
        (t, text)
        for t, text in lines
        if text.startswith(("torchrun-supervisor:", "plugin:", "sync pod:", "process v=2"))
    ]
    said += firsts.values()
    window = sorted((t, text) for t, text in said if started <= t <= end)
    return "\n".join(f"  +{(t - started).total_seconds():5.2f} s  {text}" for t, text in window)


@pytest.mark.parametrize("run", range(HOT_RELOAD_RUNS))
def test_a_hot_reload_runs_the_new_code_on_every_rank_in_the_same_pods(
    real: RealNode, namespace: str, progress_controller: Path, queue: str, tmp_path: Path, run: int
) -> None:
    """`restartMode: InPlace`: a one-line edit (`VERSION = 2`) and `kubectl torchrun sync` → the
    controller names the next in-place generation, each supervisor copies the new workspace
    generation into /app and starts the next torchrun (its standby, torch imported ahead); the
    command returns once every rank's supervisor runs it. The same two pods throughout; not a
    restart. The time from the command to the last rank's first step of the new code is printed
    (the target is 10 s); hack/bench/hot_reload.py runs it N times, every other one without the
    standby (TORCHRUN_STANDBY=0 in the queue's env)."""
    cluster = real.cluster
    plain = STANDBY_BASELINE and run % 2 == 1
    if plain:
        env = [
            *cluster.get("torchrunqueue", queue)["spec"]["env"],
            {"name": "TORCHRUN_STANDBY", "value": "0"},
        ]
        cluster.kubectl(
            "patch", "torchrunqueue", queue, "--type=merge", "-p", json.dumps({"spec": {"env": env}})
        )
    spec = {
        "jobQueue": queue,
        "numNodes": 2,
        "command": "python reload_loop.py",
        "failurePolicy": {"restartMode": "InPlace"},
    }
    project = submit(real, namespace, progress_controller, tmp_path, RELOAD_LOOP, "rld", spec)
    logs = TimedLogs(cluster, namespace, "rld")
    # the edit comes once the first code ran ~10 s (40 steps), as a user's after reading its output:
    # each generation's standby torchrun warms up 10 s after the generation started (the supervisor)
    wait_until(lambda: logs.every_rank_said("code v=1 rank={rank} step=40"), 240, interval=0.5, message="v1")
    seen = logs.poll()
    program = project / RELOAD_LOOP.name
    program.write_text(program.read_text().replace("VERSION = 1\n", "VERSION = 2\n"))
    started = datetime.now(UTC)
    synced, plugin_said = timed_plugin_run(real, namespace, project, "sync", "rld")
    returned = (datetime.now(UTC) - started).total_seconds()
    why = f"{synced.stdout}{synced.stderr}\n{diagnose(cluster, namespace, 'rld')}"
    said = synced.stdout + synced.stderr  # the plugin reports on stderr
    assert synced.returncode == 0 and "runs generation 1 (reloaded in place: the pods stayed)" in said, why
    reported = re.search(r"the pods stayed\); ([0-9.]+) s after the command", said)
    assert reported is not None and 0 < float(reported.group(1)) <= returned, said
    final = finished(cluster, namespace, "rld", timeout=120)
    # the pods stay (Succeeded) with their logs: read until a read got both ranks' last line
    try:
        wait_until(lambda: logs.every_rank_said("done v=2 rank={rank}"), 60, interval=1, message="last lines")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the last failed reads: {logs.errors}; {why}") from exc
    seen.update(logs.poll())
    assert final["phase"] == "Succeeded" and not final.get("restarts"), (final, why)
    assert final.get("inPlaceWorkspaceGeneration") == final.get("workspaceGeneration") == 1, final
    assert len(seen) == 2, (seen, why)  # the same two pods: nothing evicted, nothing recreated
    lines = logs.lines()
    firsts = [next(t for t, text in lines if text.startswith(f"code v=2 rank={r} ")) for r in (0, 1)]
    assert all(any(text == f"done v=2 rank={r}" for _, text in lines) for r in (0, 1)), lines
    said = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=rld")["items"]
    assert any(e["reason"] == "WorkspaceReloaded" and "in place" in e["message"] for e in said), said
    took = (max(firsts) - started).total_seconds()
    HOT_RELOAD_SECONDS["no standby" if plain else "standby"].append(took)

    def last(prefix: str) -> str:  # when the last rank's supervisor said `prefix`, from the command
        times = [t for t, text in lines if t > started and text.startswith(f"torchrun-supervisor: {prefix}")]
        return f"{(max(times) - started).total_seconds():.1f} s" if len(times) == 2 else "?"

    print(
        f"hot reload in place{' without the standby' if plain else ''}: sync returned after "
        f"{returned:.1f} s; every rank stepped on the new code {took:.1f} s after the command "
        f"(the supervisors heard generation 1 by {last('generation 1 asked')}, started it by "
        f"{last('generation 1: starting')})"
    )
    sync_log = cluster.kubectl("logs", "--timestamps", "-n", namespace, "rld-sync-1", check=False).stdout
    sync_said = [
        (_log_time(line.partition(" ")[0]), f"sync pod: {line.partition(' ')[2][:100]}")
        for line in sync_log.splitlines()
    ]
    print(reload_timeline([*lines, *plugin_said, *sync_said], started, progress_controller, max(firsts)))
    if took > 20:  # the slow case seen once in a few sessions: what the links and the controller said
        for pod in pods(cluster, namespace, "rld", "worker"):
            name = pod["metadata"]["name"]
            said = cluster.kubectl(
                "logs", "-n", namespace, name, "-c", "progress-reporter", "--timestamps", check=False
            )
            print(f"{name} progress-reporter:\n{said.stdout[-3000:]}")
        print(f"controller log, last lines:\n{progress_controller.read_text()[-4000:]}")
    if out := os.environ.get("TORCHRUN_BENCH_OUT"):
        Path(out).write_text(json.dumps(HOT_RELOAD_SECONDS) + "\n")


# -- unchanged Hugging Face Trainer and Lightning programs (torch 2.6, the framework hooks) -------


class LossLog:
    """Every `loss rank=<r> step=<s> <value>` line the job's worker pods printed, per attempt,
    collected while they run (a restart deletes the pods and their logs with them)."""

    def __init__(self, cluster: Cluster, ns: str, job: str) -> None:
        self.cluster, self.ns, self.job = cluster, ns, job
        self.text: dict[str, str] = {}  # pod UID -> the longest log seen
        self.attempt: dict[str, int] = {}  # pod UID -> status.restarts when first seen

    def poll(self, attempt: int) -> None:
        for pod in pods(self.cluster, self.ns, self.job, "worker"):
            uid = pod["metadata"]["uid"]
            self.attempt.setdefault(uid, attempt)
            got = self.cluster.kubectl(
                "logs", "-n", self.ns, pod["metadata"]["name"], "-c", "torchrun", check=False
            )
            if got.returncode == 0 and len(got.stdout) > len(self.text.get(uid, "")):
                self.text[uid] = got.stdout

    def losses(self, attempt: int) -> dict[tuple[int, int], float]:
        """(rank, step) -> loss printed in `attempt`."""
        out: dict[tuple[int, int], float] = {}
        for uid, text in self.text.items():
            if self.attempt[uid] != attempt:
                continue
            for m in re.finditer(r"^loss rank=(\d+) step=(\d+) (\S+)$", text, re.MULTILINE):
                out[(int(m[1]), int(m[2]))] = float(m[3])
        return out

    def lines(self, attempt: int) -> str:
        return "\n".join(t for uid, t in self.text.items() if self.attempt[uid] == attempt)


def finished(cluster: Cluster, ns: str, job: str, timeout: float = 300) -> dict[str, Any]:
    """The job's status once it Succeeded or Failed."""

    def done() -> dict[str, Any] | None:
        st = job_status(cluster, ns, job)
        return st if st.get("phase") in ("Succeeded", "Failed") else None

    return wait_until(done, timeout, interval=1, message=f"{job} finished")


def run_framework_job(
    real: RealNode, namespace: str, log: Path, tmp_path: Path, program: Path, name: str, spec: dict[str, Any]
) -> tuple[Path, LossLog]:
    """Submit `program` unchanged (it names nothing of ours: checked) as job `name`."""
    text = program.read_text()
    assert "torchrun" not in text.lower(), f"{program.name} must not know where it runs"
    project = submit(real, namespace, log, tmp_path, program, name, spec)
    return project, LossLog(real.cluster, namespace, name)


def crash_and_resume(
    real: RealNode, namespace: str, log: Path, job: str, losses: LossLog, resumed_from: str, crash_at: int
) -> dict[str, Any]:
    """Follow `job` through its crash at `crash_at` and its restart until attempt 1 resumed from
    `resumed_from` and trained past the crash; returns the status then. The first loss after the
    resume (and every one up to the crash) equals the crashed attempt's at that step."""
    cluster = real.cluster

    def resumed() -> dict[str, Any] | None:
        st = job_status(cluster, namespace, job)
        losses.poll(st.get("restarts", 0))
        cp = st.get("checkpoint") or {}
        again = losses.losses(1)
        if (cp.get("attempt"), cp.get("resumedFrom")) != (1, resumed_from):
            return None
        return st if any(step >= crash_at for _, step in again) else None

    try:
        st = wait_until(resumed, 420, interval=0.5, message=f"{job} resumed from {resumed_from}")
    except AssertionError as e:
        said = f"{job_status(cluster, namespace, job)}\n{diagnose(cluster, namespace, job)}"
        raise AssertionError(f"{said}\n{log.read_text()[-3000:]}") from e
    first, second = losses.losses(0), losses.losses(1)
    saved = int(re.findall(r"[0-9]+", resumed_from)[-1])  # checkpoint-20, epoch=0-step=20.ckpt
    assert min(s for _, s in second) == saved + 1, sorted(second)  # the step continues
    compared = sorted(k for k in second if k in first and k[1] <= crash_at)
    assert compared and compared[0][1] == saved + 1, (sorted(first), sorted(second))
    for key in compared:
        assert abs(first[key] - second[key]) <= 1e-6, (key, first[key], second[key])
    return st


@pytest.mark.real_node(1)
def test_an_unchanged_hf_trainer_program_reports_crashes_resumes_saves_on_suspend_and_resumes(
    real: RealNode, namespace: str, progress_controller: Path, tmp_path: Path
) -> None:
    """`hf_trainer.py` (no line of ours) on 2 nodes, DDP on gloo, in a queue whose
    `progress.frameworkHooks` is false and a job that turns them back on (the job's wins): its
    `checkpoint-<step>/` land on the checkpoints volume though `output_dir` is the pod-local `out`;
    status.progress shows its steps; it crashes at step 25, restarts and resumes from
    checkpoint-20 with the losses of the crashed run; suspended mid-run, both ranks save the same
    `checkpoint-<step>/` and stop; resumed, it continues from that step to 60 and succeeds. The
    image's own sitecustomize (Debian's) ran in every rank."""
    cluster = real.cluster
    queue = checkpoint_queue(real, f"hf-{namespace}", keep=20, progress={"frameworkHooks": False})
    spec = {
        "jobQueue": queue,
        "numNodes": 2,
        "command": "python hf_trainer.py --steps 60 --save 10 --crash-at 25 --step-seconds 0.3",
        "failurePolicy": {"maxRestarts": 1},
        "progress": {"frameworkHooks": True},
    }
    _, losses = run_framework_job(real, namespace, progress_controller, tmp_path, HF_TRAINER, "hf", spec)

    def status() -> dict[str, Any]:
        return job_status(cluster, namespace, "hf")

    def reporting() -> dict[str, Any] | None:
        losses.poll(status().get("restarts", 0))
        progress = status().get("progress") or {}
        return progress if (progress.get("step") or 0) >= 5 and status().get("restarts", 0) == 0 else None

    progress = wait_until(reporting, 300, interval=0.5, message="hf's status.progress past step 5")
    assert progress["totalSteps"] == 60, progress
    crash_and_resume(real, namespace, progress_controller, "hf", losses, "/checkpoints/checkpoint-20", 25)
    first = losses.lines(0)
    assert "torchrun hooks: Trainer checkpoints go to /checkpoints (output_dir out keeps the rest)" in first
    assert f"site rank=0 {IMAGE_SITECUSTOMIZE}" in first and f"site rank=1 {IMAGE_SITECUSTOMIZE}" in first

    def past(step: int) -> bool:
        losses.poll(1)
        return any(s >= step for _, s in losses.losses(1))

    wait_until(lambda: past(32), 180, interval=0.5, message="attempt 1 past step 32")
    cluster.kubectl(
        "patch", "torchrunjob", "hf", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    wait_until(lambda: status().get("phase") == "Suspended", 120, interval=1, message="Suspended")
    wait_until(lambda: not pods(cluster, namespace, "hf", "worker"), 120, interval=1, message="workers gone")
    volume = volume_dir(cluster, namespace, "hf-checkpoints")
    saved = sorted(int(p.name.split("-")[1]) for p in volume.glob("checkpoint-*"))
    on_stop = [s for s in saved if s % 10]
    assert len(on_stop) == 1 and 32 <= on_stop[0] < 60, saved  # one save, at the step both ranks agreed on
    stopped = on_stop[0]
    stopped_dir = volume / f"checkpoint-{stopped}"
    assert {"trainer_state.json", "rng_state_0.pth", "rng_state_1.pth"} <= {
        p.name for p in stopped_dir.iterdir()
    }
    assert not (volume / "out").exists() and not list(
        volume.glob("final*")
    )  # the final model is not ours to move

    cluster.kubectl(
        "patch", "torchrunjob", "hf", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}'
    )
    final = finished(cluster, namespace, "hf")
    assert final["phase"] == "Succeeded", f"{final}\n{diagnose(cluster, namespace, 'hf')}"
    assert final["checkpoint"]["resumedFrom"] == f"/checkpoints/checkpoint-{stopped}", final
    assert (final["progress"]["step"], final["progress"]["totalSteps"]) == (60, 60), final["progress"]
    for pod in pods(cluster, namespace, "hf", "worker"):
        rank, out = index_of(pod), logs(cluster, namespace, pod["metadata"]["name"])
        assert f"start rank={rank} step={stopped}" in out and f"done rank={rank} step=60" in out, out
        assert (
            f"loss rank={rank} step={stopped + 1} " in out and f"loss rank={rank} step={stopped} " not in out
        ), out


@pytest.mark.real_node(1)
def test_an_unchanged_lightning_program_reports_crashes_and_resumes_from_its_own_checkpoint(
    real: RealNode, namespace: str, progress_controller: Path, tmp_path: Path
) -> None:
    """`lightning_trainer.py` (no line of ours) on 2 nodes, DDP on gloo, hooks on by default: its
    ModelCheckpoint's `dirpath="ckpts"` (pod-local) becomes the checkpoints volume; it crashes at
    step 25, restarts and resumes from `epoch=0-step=20.ckpt` with the losses of the crashed run;
    status.progress follows its steps to the end."""
    cluster = real.cluster
    queue = checkpoint_queue(real, f"pl-{namespace}", keep=20)
    spec = {
        "jobQueue": queue,
        "numNodes": 2,
        "command": "python lightning_trainer.py --steps 40 --save 10 --crash-at 25 --step-seconds 0.3",
        "failurePolicy": {"maxRestarts": 1},
    }
    _, losses = run_framework_job(
        real, namespace, progress_controller, tmp_path, LIGHTNING_TRAINER, "pl", spec
    )
    crash_and_resume(
        real, namespace, progress_controller, "pl", losses, "/checkpoints/epoch=0-step=20.ckpt", 25
    )
    assert "torchrun hooks: ModelCheckpoint saves to /checkpoints" in losses.lines(0)
    final = finished(cluster, namespace, "pl")
    assert final["phase"] == "Succeeded", f"{final}\n{diagnose(cluster, namespace, 'pl')}"
    assert (final["progress"]["step"], final["progress"]["totalSteps"]) == (40, 40), final["progress"]
    volume = volume_dir(cluster, namespace, "pl-checkpoints")
    assert {f"epoch=0-step={s}.ckpt" for s in (10, 20, 30, 40)} <= {p.name for p in volume.iterdir()}


def test_a_queue_or_a_job_that_turns_the_hooks_off_leaves_an_hf_program_as_it_is(
    real: RealNode, namespace: str, progress_controller: Path, tmp_path: Path
) -> None:
    """The same HF program, at once in a queue with `progress.frameworkHooks: false` and, in a queue
    that leaves them on, as a job with `progress.frameworkHooks: false`: no line of the hooks, its
    checkpoints stay where it put them (nothing on the volume), no progress in status."""
    cluster = real.cluster
    off = checkpoint_queue(real, f"off-{namespace}", keep=20, progress={"frameworkHooks": False})
    on = checkpoint_queue(real, f"on-{namespace}", keep=20)
    command = "python hf_trainer.py --steps 12 --save 5"
    jobs = {
        "queue-off": {"jobQueue": off, "numNodes": 1, "command": command},
        "job-off": {"jobQueue": on, "numNodes": 1, "command": command, "progress": {"frameworkHooks": False}},
    }
    for name, spec in jobs.items():
        run_framework_job(real, namespace, progress_controller, tmp_path, HF_TRAINER, name, spec)
    for name in jobs:
        final = finished(cluster, namespace, name)
        assert final["phase"] == "Succeeded", f"{final}\n{diagnose(cluster, namespace, name)}"
        (pod,) = pods(cluster, namespace, name, "worker")
        out = logs(cluster, namespace, pod["metadata"]["name"])
        assert "done rank=0 step=12" in out and "torchrun hooks" not in out, out
        assert f"site rank=0 {IMAGE_SITECUSTOMIZE}" in out, out
        assert not list(volume_dir(cluster, namespace, f"{name}-checkpoints").glob("checkpoint-*")), name
        assert "progress" not in final, final


@pytest.mark.real_node(1)
def test_down_stops_the_real_node_and_leaves_the_host_as_it_found_it(
    real: RealNode, real_nodes: RealNodes
) -> None:
    """`down` leaves nothing of this node: no leftovers, its links, mounts and cgroups as before it
    came up, none of its processes. What the nodes share (sysctls, fixed directories) the last node
    down puts back: if this is the last, the host has the values recorded before the first node
    came up (and, when no other node was up before this one, exactly what this test saw then); if
    another node is still up, the record is kept, unchanged, for it to put back."""
    subprocess.run([str(CONTROLPLANE), "down"], env=real.env, check=True, timeout=300)
    left = leftovers(real.env)
    assert left == "", left
    before = real_nodes.before[real.index]
    # a pod of another node may be between its veth's creation and its bridge: look again a moment
    wait_until(
        lambda: host_state(real.index, real.cluster.run_dir)["own"] == before["own"],
        10,
        message=f"the host as before {real.name} came up: {before['own']}",
    )
    after = host_state(real.index, real.cluster.run_dir)
    record = real_nodes.record[real.index]
    if holders():  # another node is up: the host-wide record waits for it
        assert host_record() == record, (holders(), host_record(), record)
    else:
        assert not (HOST_RECORD / "host.saved").exists()
        assert after["shared"]["sysctls"] == {key: record[key] for key in SYSCTLS}, (after, record)
        assert {p: not there for p, there in after["shared"]["paths"].items()} == {
            p: f"absent {p}" in record for p in after["shared"]["paths"]
        }, (after, record)
        if not real_nodes.others_before[real.index]:
            assert after["shared"] == before["shared"]
    procs = subprocess.run(
        ["pgrep", "-af", str(real.cluster.run_dir)], check=False, capture_output=True, text=True
    ).stdout
    assert procs == "", procs
