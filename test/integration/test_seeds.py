"""The seed documents' own manifests, applied verbatim (test/integration/seeds/), on the real
control plane — what people migrating from the seed system will paste (SPEC §3).

The manifests are never changed. What a cluster needs for them, provided here as an admin would:
- the PriorityClasses two queues name (`gpu-priority`, `production-priority`);
- KAI-scheduler for the two `kai-scheduler` queues: its CRDs (hack/testbed/scheduler-crds.sh; KAI's
  Go module is refused by the module proxy, so its stand-in CRDs with KAI's group and names), the
  parent KAI Queue `default` that gpu-training-queue names, and a scheduler answering to
  `kai-scheduler`: the test bed's own kube-scheduler started with one profile of that name. It is a
  stand-in — it places pods one by one, without KAI's gang scheduling; the PodGroup the controller
  makes for KAI is asserted, not enforced. The run's summary lists the tests on either stand-in
  under "stand-ins" (test/summary_notes.py);
- nodes for h100-training: four extra kwok nodes carrying its nodeSelector label
  (`gpu.nvidia.com/class: H100`), 8 GPUs and a little more than its 128 CPUs and 1024Gi (the
  test bed's nodes have 96 CPUs) — and nothing else: `nodeResources.gpuType: h100-80gb` is
  informational (SPEC §3) and never becomes a node selector, so the job must land on nodes
  labelled only as the seed's own `scheduling.nodeSelector` says;
- the changes document's job names a queue `gpu-queue` that no seed document defines: the test
  creates a plain 8-GPU queue of that name.
All of it is removed at the end of the module.

Every seed job as written takes its code from an upload (the default source; `volumes.workspace`
with `source: zip` in the changes document). As written, each is admitted with the seed's sizes
(numGPUs 16 → 2 nodes, 32 → 4), gets its workspace PVC and sync pod `<job>-sync-0` and waits in
phase Syncing; the test then uploads an archive through the kube-apiserver's exec endpoint, as
`kubectl torchrun submit` does, and the job runs. With the single change `workspace: {source:
none}` (the code in the image) the README's two etcd-v2 jobs run as well: their managed etcd,
then their workers, Running on the nodes their queues select.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from customresources import crd_names, remove_crds
from jobs import condition
from summary_notes import KAI_CRDS, KAI_SCHEDULER, STAND_IN, stand_in
from testbed import REPO, Cluster, wait_until
from uploads import archive, upload, wait_running

from controller.cmd.main import App

SEEDS = Path(__file__).resolve().parent / "seeds"
QUEUE_FILES = (
    "readme-gpu-training-queue.yaml",
    "readme-h100-training-queue.yaml",
    "readme-dev-and-prod-queues.yaml",
)
SEED_QUEUES = ("gpu-training-queue", "h100-training", "dev-queue", "prod-queue")
PRIORITY_CLASSES = ("gpu-priority", "production-priority")
H100_NODES = tuple(f"h100-node-{i}" for i in range(4))
# what each seed job resolves to on its queue: nodes, GPUs, where its pods may run
JOBS = {
    "training-job": ("readme-training-job.yaml", 2, 16),
    "vit-training": ("readme-vit-training-job.yaml", 4, 32),
    "multi-node-training": ("changes-multi-node-training-job.yaml", 4, 32),
}


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((SEEDS / name).read_text()) if d]


def h100_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                "gpu.nvidia.com/class": "H100",
            },
        },
        "status": {
            "capacity": {"cpu": "132", "memory": "1100Gi", "pods": "110", "nvidia.com/gpu": "8"},
        },
    }


def kai_scheduler_standin(cluster: Cluster, workdir: Path) -> subprocess.Popen[bytes]:
    """The test bed's kube-scheduler serving one profile, `kai-scheduler` (see the docstring)."""
    config = workdir / "kai-scheduler.yaml"
    kubeconfig = cluster.run_dir / "scheduler.kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(kubeconfig)},
                "leaderElection": {"leaderElect": False},
                "profiles": [{"schedulerName": "kai-scheduler"}],
            }
        )
    )
    binary = cluster.kubectl_path.parent / "kube-scheduler"
    log = (workdir / "kai-scheduler.log").open("wb")
    return subprocess.Popen(
        [str(binary), "--config", str(config), "--bind-address", "127.0.0.1", "--secure-port", "0", "-v=1"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@pytest.fixture(scope="module")
def seed_cluster(cluster: Cluster, crds: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """What the seed manifests need from a cluster (module docstring), and its seed queues; yields
    where KAI's CRDs came from (scheduler-crds.sh's SOURCE line)."""
    proc = subprocess.run(
        [str(REPO / "hack" / "testbed" / "scheduler-crds.sh"), "kai"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"scheduler-crds.sh kai failed: {proc.stderr.strip()[-2000:]}")
    kai_dir = Path(proc.stdout.strip().split("=", 1)[1])
    kai_crds = crd_names(kai_dir)
    installed = [n for n in kai_crds if cluster.kubectl("get", "crd", n, check=False).returncode != 0]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(kai_dir))
    cluster.wait_established(*kai_crds)
    for name in PRIORITY_CLASSES:
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        cluster.apply({**body, "value": 1000})
    cluster.apply({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "default"}})
    cluster.apply([h100_node(n) for n in H100_NODES])
    cluster.kubectl("wait", "--for=condition=Ready", *(f"node/{n}" for n in H100_NODES), "--timeout=60s")
    scheduler = kai_scheduler_standin(cluster, tmp_path_factory.mktemp("kai"))
    for name in QUEUE_FILES:
        cluster.apply((SEEDS / name).read_text())  # verbatim
    try:
        yield (kai_dir / "SOURCE").read_text().strip()
    finally:
        cluster.kubectl(
            "delete", "torchrunqueue", *SEED_QUEUES, "gpu-queue", "--ignore-not-found", check=False
        )
        scheduler.terminate()
        scheduler.wait(10)
        cluster.kubectl("delete", "node", *H100_NODES, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "queues.scheduling.run.ai", "default", "--ignore-not-found", check=False)
        cluster.kubectl("delete", "priorityclass", *PRIORITY_CLASSES, "--ignore-not-found", check=False)
        if installed:
            wait_until(
                lambda: not cluster.get("queues.scheduling.run.ai")["items"], 60, message="KAI Queues gone"
            )
            remove_crds(cluster, installed)


@pytest.fixture(autouse=True)
def kai_crds_stand_in(request: pytest.FixtureRequest, record_property: Callable[[str, object], None]) -> None:
    """A test on the seed cluster runs against the KAI CRDs it serves: the stand-in's, when
    KAI's module is refused, and the run's summary lists the test under it."""
    if "seed_cluster" not in request.fixturenames:
        return
    source = request.getfixturevalue("seed_cluster")
    if source.startswith("stand-in"):
        record_property(STAND_IN, stand_in(KAI_CRDS, source))


def tj(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.get("torchrunjob", name, "-n", ns)


def with_reason(cluster: Cluster, ns: str, name: str, ctype: str, reason: str) -> dict[str, Any] | None:
    obj = tj(cluster, ns, name)
    cond = condition(obj, ctype)
    return obj if cond and cond["reason"] == reason else None


def test_the_seed_queues_are_ready(
    cluster: Cluster, seed_cluster: str, start_controller: Callable[..., App]
) -> None:
    start_controller()
    for name in SEED_QUEUES:
        ready = wait_until(
            lambda n=name: (
                (c := condition(cluster.get("torchrunqueue", n), "Ready")) and c["status"] == "True"
            ),
            60,
            message=f"queue {name} Ready",
        )
        assert ready
    gpu = cluster.get("queues.scheduling.run.ai", "gpu-training")
    assert gpu["spec"]["parentQueue"] == "default"
    assert cluster.get("queues.scheduling.run.ai", "gpu-h100-queue")["metadata"]["name"] == "gpu-h100-queue"


@pytest.mark.stand_in(KAI_SCHEDULER)  # two of the three jobs are on kai-scheduler queues
def test_the_seed_jobs_as_written_wait_for_their_upload_then_run(
    cluster: Cluster,
    seed_cluster: str,
    namespace: str,
    start_controller: Callable[..., App],
) -> None:
    app = start_controller()
    gpu_queue = {"nodeResources": {"gpus": 8}, "image": "pytorch/pytorch:2.0.1-cuda11.7-cudnn8-runtime"}
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": {"name": "gpu-queue"},
            "spec": gpu_queue,
        }
    )
    for file, _, _ in JOBS.values():
        cluster.apply((SEEDS / file).read_text(), namespace)  # verbatim
    for name, (_, nodes, gpus) in JOBS.items():
        waiting = wait_until(
            lambda n=name: with_reason(cluster, namespace, n, "WorkspaceReady", "Syncing"),
            60,
            message=f"{name} admitted and waiting for its upload",
        )
        assert condition(waiting, "Admitted")["status"] == "True"
        assert (waiting["status"]["nodes"], waiting["status"]["gpus"]) == (nodes, gpus), name
        assert waiting["status"]["phase"] == "Syncing"
        assert cluster.get("pvc", f"{name}-workspace", "-n", namespace)["metadata"]["name"]
    assert not cluster.get("jobs", "-n", namespace)["items"]
    # together they need 10 whole nodes (the test bed has 8): each runs, then makes room
    for name in JOBS:
        wait_running(cluster, namespace, f"{name}-sync-0")
        sent = upload(cluster, namespace, f"{name}-sync-0", archive({"train.py": b"print('seed')\n"}), 0)
        assert sent.returncode == 0, sent.stderr.decode()
        wait_until(
            lambda n=name: with_reason(cluster, namespace, n, "Running", "AllWorkersRunning"),
            120,
            message=f"{name} Running after its upload",
        )
        suspend = '{"spec":{"suspend":true}}'  # its workers go, its room is free for the next
        cluster.kubectl("patch", "tj", name, "-n", namespace, "--type=merge", "-p", suspend)
        selector = f"torchrun-job-name={name},torchrun.ai/role=worker"
        wait_until(
            lambda s=selector: not cluster.get("pods", "-n", namespace, "-l", s)["items"],
            60,
            message=f"{name}'s workers gone",
        )
    app.recorder.flush()
    events = cluster.get(
        "events", "-n", namespace, "--field-selector", "involvedObject.name=multi-node-training"
    )
    deprecated = [e for e in events["items"] if e["reason"] == "DeprecatedField"]
    assert deprecated and deprecated[0]["type"] == "Warning"
    assert "write that instead" in deprecated[0]["message"] and "{source: upload}" in deprecated[0]["message"]


@pytest.mark.stand_in(KAI_SCHEDULER)
@pytest.mark.parametrize("name", ["training-job", "vit-training"])
def test_the_seed_etcd_v2_jobs_run_with_the_code_in_the_image(
    cluster: Cluster, seed_cluster: str, namespace: str, start_controller: Callable[..., App], name: str
) -> None:
    file, nodes, gpus = JOBS[name]
    (manifest,) = docs(file)
    manifest["spec"]["workspace"] = {"source": "none"}  # the one change: the code in the image
    start_controller()
    cluster.apply(manifest, namespace)
    running = wait_until(
        lambda: with_reason(cluster, namespace, name, "Running", "AllWorkersRunning"),
        120,
        message=f"{name} Running",
    )
    assert (running["status"]["nodes"], running["status"]["gpus"]) == (nodes, gpus)
    etcd = cluster.get("pod", f"{name}-etcd", "-n", namespace)
    assert etcd["metadata"]["ownerReferences"][0]["uid"] == running["metadata"]["uid"]
    worker_job = cluster.get("job", name, "-n", namespace)
    args = worker_job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--nnodes={nodes}" in args and "--nproc_per_node=8" in args
    assert "--rdzv_backend=etcd-v2" in args and f"--rdzv_endpoint={name}-etcd:2379" in args
    pods = cluster.get("pods", "-n", namespace, "-l", f"torchrun-job-name={name},torchrun.ai/role=worker")[
        "items"
    ]
    assert len(pods) == nodes
    assert {p["spec"]["schedulerName"] for p in pods} == {"kai-scheduler"}
    placed = {p["spec"]["nodeName"] for p in pods}
    assert len(placed) == nodes
    if name == "vit-training":  # gpuType h100-80gb is no selector: only the seed's nodeSelector places it
        assert placed == set(H100_NODES)
        assert {json.dumps(p["spec"].get("nodeSelector"), sort_keys=True) for p in pods} == {
            json.dumps({"gpu.nvidia.com/class": "H100"})
        }
    else:
        assert {p["spec"]["priorityClassName"] for p in pods} == {"gpu-priority"}
    group = cluster.get("podgroups.scheduling.run.ai", name, "-n", namespace)
    assert group["spec"]["minMember"] == nodes


def test_a_cpu_only_queue_runs_cpu_workers(
    cluster: Cluster, crds: Path, namespace: str, start_controller: Callable[..., App]
) -> None:
    """The seed lists CPU-only jobs: a queue with `gpus: 0` runs one process per CPU of the queue
    (4 here), requests no GPU, and its job runs to success."""
    queue = f"cpu-{namespace}"
    annotations = {"kwok.torchrun.ai/outcome": "succeed", "kwok.torchrun.ai/duration": "4s"}
    spec = {
        "nodeResources": {"gpus": 0, "cpus": "4", "memory": "16Gi"},
        "image": "pytorch/pytorch:2.0.1-cuda11.7-cudnn8-runtime",
        "podAnnotations": annotations,
    }
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": {"name": queue},
            "spec": spec,
        }
    )
    try:
        start_controller()
        job = {
            "jobQueue": queue,
            "numNodes": 2,
            "command": "python train.py",
            "distributed": {"backend": "gloo"},
            "workspace": {"source": "none"},
        }
        cluster.apply(
            {
                "apiVersion": "torchrun.ai/v1alpha1",
                "kind": "TorchrunJob",
                "metadata": {"name": "cpu"},
                "spec": job,
            },
            namespace,
        )
        running = wait_until(
            lambda: with_reason(cluster, namespace, "cpu", "Running", "AllWorkersRunning"),
            60,
            message="Running",
        )
        assert (running["status"]["nodes"], running["status"]["gpus"]) == (2, 0)
        (container,) = cluster.get("job", "cpu", "-n", namespace)["spec"]["template"]["spec"]["containers"]
        assert "--nproc_per_node=4" in container["args"]
        assert {e["name"]: e.get("value") for e in container["env"]}["WORLD_SIZE"] == "8"
        # the pod asks for nodeResources in all, the reporter sidecar's 10m and 48Mi included
        assert container["resources"]["limits"] == {"cpu": "3990m", "memory": "16336Mi"}
        for pod in cluster.get("pods", "-n", namespace, "-l", "torchrun-job-name=cpu")["items"]:
            assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"]["requests"]
        wait_until(
            lambda: with_reason(cluster, namespace, "cpu", "Succeeded", "Succeeded"), 60, message="Succeeded"
        )
    finally:
        cluster.kubectl("delete", "torchrunqueue", queue, "--ignore-not-found", "--wait=false", check=False)
