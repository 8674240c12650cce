"""The headless Service `<job>` (pure): its manifest, and the patch that undoes drift.

`publishNotReadyAddresses`, so rank 0 resolves before it is ready — the rendezvous needs exactly
that. `service_drift` compares only the fields we set (the API server fills in others, such as
`clusterIP: None`'s family fields and port defaults) and returns None when nothing drifted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.api import TorchrunJob
from controller.api.labels import WORKER_ROLE
from controller.torchrunjob.manifests.common import labels, object_metadata


def build_service(job: TorchrunJob) -> dict[str, Any]:
    port = job.spec.distributed.rdzv_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(job, job.name, WORKER_ROLE),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": labels(job, WORKER_ROLE),
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def service_drift(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that brings `existing`'s spec back to `desired` (clusterIP is immutable
    and never patched), or None when the fields we own match."""
    want, have = desired["spec"], existing.get("spec") or {}
    if all(have.get(k) == v for k, v in want.items() if k != "ports") and _ports(have) == _ports(want):
        return None
    return {"spec": {k: v for k, v in want.items() if k != "clusterIP"}}


def _ports(spec: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    return sorted((p.get("name"), p.get("port")) for p in spec.get("ports") or ())
