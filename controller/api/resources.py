"""REST descriptors of the two kinds, for clients and informers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
from controller.meta import GroupKind, Obj, Owner, Resource, resolve_owner

TORCHRUNJOBS = Resource(GROUP, VERSION, JOB_PLURAL, JOB_KIND, namespaced=True)
TORCHRUNQUEUES = Resource(GROUP, VERSION, QUEUE_PLURAL, QUEUE_KIND, namespaced=False)
TORCHRUNJOB_KIND = GroupKind(GROUP, JOB_KIND)
BATCH_JOB_KIND = GroupKind("batch", "Job")  # a job's worker Job, which controls its pods


def owning_job(obj: Obj, worker_job: Callable[[str, str], Obj | None]) -> Owner | None:
    """The TorchrunJob that controls `obj`: directly, or through the worker Job (read with
    `worker_job(namespace, name)`, its UID checked) that controls it. The one rule of ownership
    for the controller's handlers and the garbage collector."""
    return resolve_owner(obj, TORCHRUNJOB_KIND, BATCH_JOB_KIND, worker_job)


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
