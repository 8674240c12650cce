"""The `torchrun-controller` program as a process: crash-safety and many jobs at once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed import Cluster, wait_until


@contextmanager
def controller_process(cluster: Cluster, namespace: str, *flags: str) -> Iterator[subprocess.Popen[bytes]]:
    cmd = [
        sys.executable,
        "-m",
        "controller.cmd.main",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--namespace",
        namespace,
        "--metrics-addr",
        "127.0.0.1:0",
        "--health-addr",
        "127.0.0.1:0",
        "--log-level",
        "warning",
        *flags,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def queue(cluster: Cluster, gpus: int, duration: str) -> str:
    name = f"q-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": {"name": name},
            "spec": {
                "nodeResources": {"gpus": gpus},
                "image": "pytorch/pytorch:2.4.0",
                "podAnnotations": {
                    "kwok.torchrun.ai/outcome": "succeed",
                    "kwok.torchrun.ai/duration": duration,
                },
            },
        }
    )
    return name


def jobs_manifest(queue_name: str, names: list[str]) -> list[dict[str, object]]:
    return [
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": n},
            "spec": {
                "jobQueue": queue_name,
                "numNodes": 2,
                "command": "python train.py",
                "workspace": {"source": "none"},
            },
        }
        for n in names
    ]


def phases(cluster: Cluster, ns: str) -> dict[str, str]:
    items = cluster.get("torchrunjobs", "-n", ns)["items"]
    return {i["metadata"]["name"]: (i.get("status") or {}).get("phase", "") for i in items}


def test_killed_between_writes_no_duplicates_and_job_finishes(
    cluster: Cluster, crds: Path, namespace: str
) -> None:
    q = queue(cluster, gpus=8, duration="6s")
    cluster.apply(jobs_manifest(q, ["crash"]), namespace)
    rng = random.Random(7)
    # kill -9 the controller at a few random moments while it creates and watches the job
    for _ in range(3):
        with controller_process(cluster, namespace) as proc:
            time.sleep(rng.uniform(1.0, 3.0))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    with controller_process(cluster, namespace):
        wait_until(lambda: phases(cluster, namespace).get("crash") == "Succeeded", 90, message="Succeeded")
    assert len(cluster.get("jobs", "-n", namespace)["items"]) == 1
    assert len(cluster.get("services", "-n", namespace)["items"]) == 1
    pods = cluster.get("pods", "-n", namespace, "-l", "torchrun-job-name=crash")["items"]
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    status = cluster.get("torchrunjob", "crash", "-n", namespace)["status"]
    assert status["restarts"] == 0


def test_fifty_jobs_with_four_workers_all_succeed(cluster: Cluster, crds: Path, namespace: str) -> None:
    q = queue(cluster, gpus=2, duration="2s")  # 2 nodes × 2 GPUs: 8 jobs fit at once, the rest wait
    names = [f"job-{i:02d}" for i in range(50)]
    with controller_process(cluster, namespace, "--threadiness", "4"):
        cluster.apply(jobs_manifest(q, names), namespace)
        wait_until(
            lambda: list(phases(cluster, namespace).values()).count("Succeeded") == 50,
            300,
            interval=1.0,
            message="50 jobs Succeeded",
        )
    assert len(cluster.get("jobs", "-n", namespace)["items"]) == 50
    for job in cluster.get("torchrunjobs", "-n", namespace)["items"]:
        assert job["status"]["restarts"] == 0
        assert job["status"]["workers"]["succeeded"] >= 1
