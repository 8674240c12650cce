"""Transforms applied to objects before they are cached (client-go's TransformFunc).

`strip_managed_fields` (the default) drops what no controller reads. `project(shape)` keeps only
the fields a controller uses — for pods, the biggest cache by far, that cuts memory several-fold.
A projected object is still a valid-looking object for everything this project reads from it;
nothing that writes an object back may start from a projected copy (we never do: writes are
built from builders, or from the TorchrunJob/Queue caches, which are not projected).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.api.labels import GENERATION_ANNOTATION, RESTART_ANNOTATION
from controller.pods import COMPLETION_INDEX_ANNOTATION

Shape = Mapping[str, "Shape | bool"]


def strip_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The default transform: managedFields are often half an object and no controller reads them."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return obj


def _keep(value: Any, shape: Shape | bool) -> Any:
    if shape is True or not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, sub in shape.items():  # type: ignore[union-attr]
        if key in value:
            item = value[key]
            out[key] = [_keep(v, sub) for v in item] if isinstance(item, list) else _keep(item, sub)
    return out


def project(shape: Shape) -> Any:
    """A transform keeping only `shape`'s fields (True: the whole subtree; lists map over items)."""

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        kept: dict[str, Any] = _keep(obj, shape)
        return kept

    return transform


_METADATA: Shape = {
    "name": True,
    "namespace": True,
    "uid": True,
    "resourceVersion": True,
    "generation": True,
    "creationTimestamp": True,
    "deletionTimestamp": True,
    "labels": True,
    "ownerReferences": True,
    "finalizers": True,
}
# what the controllers read from pods: identity, ownership, placement and how they are doing
POD_SHAPE: Shape = {
    "apiVersion": True,
    "kind": True,
    # the node rank, and which whole-job restart (managed etcd pods) and workspace generation (sync
    # pods) a pod was made for: reading them from a projection that dropped them would call every
    # etcd pod restart 0 and every sync pod generation 0
    "metadata": {
        **_METADATA,
        "annotations": {
            COMPLETION_INDEX_ANNOTATION: True,
            RESTART_ANNOTATION: True,
            GENERATION_ANNOTATION: True,
        },
    },
    # schedulingGates: a pod Kueue holds behind its elastic-job gate is a growth waiting for
    # admission, not a worker failing to start (torchrunjob/starting.py)
    "spec": {"nodeName": True, "hostname": True, "subdomain": True, "schedulingGates": {"name": True}},
    "status": {
        "phase": True,
        "reason": True,
        "message": True,
        "startTime": True,
        "conditions": {"type": True, "status": True, "reason": True, "message": True},
        "containerStatuses": {"name": True, "ready": True, "restartCount": True, "state": True},
        # rank 0's `prepare` reports checkpoints in its termination message (torchrunjob/checkpoints.py)
        "initContainerStatuses": {"name": True, "state": True},
    },
}
slim_pod = project(POD_SHAPE)
# what the controllers read from worker Jobs: identity, ownership, the annotations that say which
# attempt and workspace generation a Job was made for, the fields we change after creating it
# (suspend, parallelism), and its status. The pod template — most of a worker Job's bytes: the
# torchrun container, its init containers, env and volumes — is ours and immutable: nobody reads
# it back, so it is not cached (~1 KB kept of a typical worker Job's several)
JOB_SHAPE: Shape = {
    "apiVersion": True,
    "kind": True,
    "metadata": {**_METADATA, "annotations": True},
    "spec": {
        "parallelism": True,
        "completions": True,
        "completionMode": True,
        "suspend": True,
        "managedBy": True,
    },
    "status": True,
}
slim_job = project(JOB_SHAPE)
