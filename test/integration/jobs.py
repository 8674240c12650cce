"""Helpers shared by the controller tests: submit TorchrunQueues and TorchrunJobs, read their
conditions (`condition`, from testbed.py) and phases, run the controller program."""

from __future__ import annotations

import sys
import uuid
from typing import Any

from testbed import Cluster, condition, wait_until

from controller.cmd.main import App

# `condition` lives in testbed.py; the tests that import it from here still may
__all__ = [
    "condition",
    "controller_command",
    "make_job",
    "make_queue",
    "phases",
    "queue_manifest",
    "queue_ready",
    "rest_requests",
]


def make_job(cluster: Cluster, ns: str, queue: str, name: str = "train", **spec: Any) -> str:
    """A 2-node job (unless `numGPUs` is given) running `python train.py` from the image."""
    body = {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunJob",
        "metadata": {"name": name},
        "spec": {
            "jobQueue": queue,
            "command": "python train.py --epochs 1",
            "workspace": {"source": "none"},
            **({"numNodes": 2} if "numGPUs" not in spec else {}),
            **spec,
        },
    }
    cluster.apply(body, ns)
    return name


def make_queue(cluster: Cluster, gpus: int, duration: str, outcome: str = "succeed") -> str:
    """A TorchrunQueue of a fresh name, `gpus` GPUs (and no CPUs or memory) a node, whose kwok pods
    end as `outcome` after `duration`."""
    name = f"q-{uuid.uuid4().hex[:6]}"
    cluster.apply(queue_manifest(name, outcome, duration, nodeResources={"gpus": gpus}))
    return name


def queue_ready(cluster: Cluster, queue: str, timeout: float = 30) -> dict[str, Any]:
    """The TorchrunQueue `queue` once a running controller marked it Ready=True. A job made before
    that is seen first beside a queue with no status yet: it waits, `Admitted=False QueueNotReady`
    ("not Ready yet"), until the queue's status enqueues it again."""
    return wait_until(
        lambda: (
            (q := cluster.get("torchrunqueue", queue))
            and (condition(q, "Ready") or {}).get("status") == "True"
            and q
        ),
        timeout,
        interval=0.2,
        message=f"TorchrunQueue {queue} Ready",
    )


def phases(cluster: Cluster, ns: str) -> dict[str, str]:
    """Every TorchrunJob of `ns`: its phase by its name ("" before the first status)."""
    items = cluster.get("torchrunjobs", "-n", ns)["items"]
    return {i["metadata"]["name"]: (i.get("status") or {}).get("phase", "") for i in items}


def controller_command(cluster: Cluster, namespace: str, *flags: str) -> list[str]:
    """The `torchrun-controller` program for one test namespace, metrics on free ports."""
    return [
        sys.executable, "-m", "controller.cmd.main", "--kubeconfig", str(cluster.kubeconfig),
        "--namespace", namespace, "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0", *flags,
    ]  # fmt: skip


def rest_requests(app: App, resource: str, verbs: tuple[str, ...] | None = None) -> float:
    """Requests the controller sent for `resource` (optionally only these verbs), by its own REST
    metrics."""
    return sum(
        s.value
        for metric in app.metrics.rest_requests.collect()
        for s in metric.samples
        if s.name.endswith("_total")
        and s.labels.get("resource") == resource
        and (verbs is None or s.labels.get("verb") in verbs)
    )


def queue_manifest(name: str, outcome: str = "run", duration: str = "1s", **spec: Any) -> dict[str, Any]:
    """An 8-GPU TorchrunQueue whose kwok pods end as `outcome` after `duration` (extra pod
    annotations under `annotations=`, other spec fields as given)."""
    annotations = {"kwok.torchrun.ai/outcome": outcome, "kwok.torchrun.ai/duration": duration}
    annotations.update(spec.pop("annotations", {}))
    return {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunQueue",
        "metadata": {"name": name},
        "spec": {
            "nodeResources": {"gpus": 8, "cpus": "90", "memory": "900Gi"},
            "image": "pytorch/pytorch:2.4.0",
            "podAnnotations": annotations,
            **spec,
        },
    }
