"""REST descriptors of the two kinds, for clients and informers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.api.groupversion import (
    API_VERSION,
    GROUP,
    JOB_KIND,
    JOB_PLURAL,
    QUEUE_KIND,
    QUEUE_PLURAL,
    VERSION,
)
from controller.meta import Resource

TORCHRUNJOBS = Resource(GROUP, VERSION, JOB_PLURAL, JOB_KIND, namespaced=True)
TORCHRUNQUEUES = Resource(GROUP, VERSION, QUEUE_PLURAL, QUEUE_KIND, namespaced=False)


def controller_reference(kind: str, name: str, uid: str) -> dict[str, Any]:
    """The ownerReference that makes one of our kinds the controller of an object, so deleting it
    deletes the object (and, with blockOwnerDeletion, foreground deletion waits for it)."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


JOB_QUEUE_INDEX = "queue"


def job_queue_index(obj: Mapping[str, Any]) -> list[str]:
    """Index function for TorchrunJobs: the queue each names (both controllers look jobs up by it)."""
    queue = (obj.get("spec") or {}).get("jobQueue")
    return [queue] if queue else []
