"""Helpers shared by the controller tests: submit a TorchrunJob and read its conditions."""

from __future__ import annotations

from typing import Any

from testbed import Cluster


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


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return None
