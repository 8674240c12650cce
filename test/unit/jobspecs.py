"""A TorchrunQueue, a TorchrunJob and their worker Job, as the unit tests of the builders make them."""

from __future__ import annotations

from typing import Any

from controller.api import TorchrunJob, TorchrunQueue, resolve_topology
from controller.torchrunjob.manifests.launch import parse_command
from controller.torchrunjob.manifests.worker import build_worker_job


def queue(**spec: Any) -> TorchrunQueue:
    base: dict[str, Any] = {"nodeResources": {"gpus": 8, "cpus": "96", "memory": "1Ti"}, "image": "img:1"}
    base.update(spec)
    return TorchrunQueue.from_json({"metadata": {"name": "q"}, "spec": base})


def job(**spec: Any) -> TorchrunJob:
    base: dict[str, Any] = {"jobQueue": "q", "numNodes": 2, "command": "python train.py"}
    base.update(spec)
    return TorchrunJob.from_json({"metadata": {"name": "j", "namespace": "ns", "uid": "u-1"}, "spec": base})


def worker(j: TorchrunJob, q: TorchrunQueue, **kw: Any) -> dict[str, Any]:
    return build_worker_job(
        j, q, resolve_topology(j.spec, q.spec.node_resources), parse_command(j.spec.command), **kw
    )


def env_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        e["name"]: e.get("value", e.get("valueFrom"))
        for e in manifest["spec"]["template"]["spec"]["containers"][0]["env"]
    }
