"""A dynamic provisioner for the test bed's StorageClass: one hostPath volume per claim.

For each claim of a class whose provisioner is `testbed.torchrun.ai/hostpath` that has no volume
yet, it makes `$RUN_DIR/volumes/pvc-<claim uid>` and a PersistentVolume for it, pre-bound to the
claim by `claimRef` (as external provisioners do); kube-controller-manager's PV binder then binds
the pair. The volume carries `pv.kubernetes.io/provisioned-by`, so the binder leaves reclaiming to
us: a Released volume with reclaim policy Delete is deleted here, directory first. Claims of
another class, or of a class that does not exist, are not ours: they stay Pending and the binder
records why in an Event.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from controller.cache import Lister
from controller.rest import ApiError, RESTClient
from nodeagent.api import FIELD_MANAGER, PROVISIONED_BY, PROVISIONER, PVS

log = structlog.get_logger("provisioner")
Obj = Mapping[str, Any]


def volume_name(claim: Obj) -> str:
    return f"pvc-{claim['metadata']['uid']}"


def volume_for(claim: Obj, storage_class: Obj, path: Path) -> dict[str, Any]:
    """The PersistentVolume for `claim` (pure)."""
    meta, spec = claim["metadata"], claim["spec"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(claim), "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or "Delete",
            "storageClassName": storage_class["metadata"]["name"],
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }


class HostPathProvisioner:
    def __init__(
        self, client: RESTClient, volumes_dir: Path, claims: Lister, volumes: Lister, classes: Lister
    ) -> None:
        self.client = client
        self.volumes_dir = volumes_dir
        self.claims = claims
        self.volumes = volumes
        self.classes = classes

    def sync_claim(self, key: str) -> None:
        ns, _, name = key.partition("/")
        claim = self.claims.get(name, ns)
        if claim is None or claim["spec"].get("volumeName") or claim["metadata"].get("deletionTimestamp"):
            return
        sc = self.classes.get(claim["spec"].get("storageClassName") or "")
        if sc is None or sc.get("provisioner") != PROVISIONER:
            return  # not ours (or no such class: the binder's Event says so)
        if self.volumes.get(volume_name(claim)) is not None:
            return
        path = self.volumes_dir / volume_name(claim)
        path.mkdir(parents=True, exist_ok=True)
        # writable by every pod user, as local-path provisioners make it: fsGroup does not apply to
        # hostPath volumes, and on the real node pods run as their own non-root users
        path.chmod(0o777)
        try:
            self.client.create(PVS, volume_for(claim, sc, path), field_manager=FIELD_MANAGER)
        except ApiError as exc:
            if not exc.already_exists:
                raise
        log.info("provisioned", claim=key, volume=volume_name(claim), path=str(path))

    def sync_volume(self, name: str) -> None:
        pv = self.volumes.get(name)
        path = self.volumes_dir / name
        if pv is None:  # deleted (by us or anyone): its directory goes too
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            return
        if (pv["metadata"].get("annotations") or {}).get(PROVISIONED_BY) != PROVISIONER:
            return
        released = (pv.get("status") or {}).get("phase") in ("Released", "Failed")
        if released and pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
            shutil.rmtree(path, ignore_errors=True)
            try:
                self.client.delete(PVS, name, uid=pv["metadata"]["uid"])
            except ApiError as exc:
                if not exc.not_found:
                    raise
            log.info("deleted released volume", volume=name)
