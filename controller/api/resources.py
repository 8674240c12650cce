"""REST descriptors of the two kinds, for clients and informers."""

from __future__ import annotations

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
from controller.rest.resources import Resource

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
