"""A pod's volumes as host directories, and container paths rewritten to them.

What a kubelet would mount, the agent points at a directory: a PersistentVolumeClaim at its
volume's hostPath (made by `provisioner.py`), a Secret or ConfigMap at a directory of its keys as
files, a hostPath at itself, anything else (emptyDir, the service account token, downward API) at
an empty directory of the pod's own. A container's mounts (`mountPath`, `subPath`) then map any
path under a mountPath to the host: `rewrite("/workspace/x")` is `<host dir>/x`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

Obj = Mapping[str, Any]
TERMINATION_LOG = "/dev/termination-log"  # a container's default terminationMessagePath


class NotReadyError(Exception):
    """Something the pod needs is not there yet (an unbound claim, a missing Secret): retry."""


class Lookup(Protocol):
    def claim_dir(self, namespace: str, claim: str) -> Path: ...
    def secret(self, namespace: str, name: str, optional: bool) -> dict[str, bytes]: ...
    def configmap(self, namespace: str, name: str, optional: bool) -> dict[str, bytes]: ...


def secret_data(secret: Obj) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def configmap_data(cm: Obj) -> dict[str, bytes]:
    data = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return data


def _write_keys(target: Path, data: dict[str, bytes], items: list[Obj] | None) -> None:
    """A Secret's or ConfigMap's keys as files (only `items`, at their `path`, when given)."""
    target.mkdir(parents=True, exist_ok=True)
    chosen = [(i["key"], i.get("path") or i["key"]) for i in items] if items else [(k, k) for k in data]
    for key, rel in chosen:
        if key not in data:
            raise NotReadyError(f"key {key!r} is missing")
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[key])


def volume_dirs(pod: Obj, pod_dir: Path, lookup: Lookup) -> dict[str, Path]:
    """Each of the pod's volumes by name, as a host directory (made or filled here)."""
    ns = pod["metadata"]["namespace"]
    out: dict[str, Path] = {}
    for vol in pod["spec"].get("volumes") or ():
        name = vol["name"]
        own = pod_dir / "volumes" / name
        if "persistentVolumeClaim" in vol:
            out[name] = lookup.claim_dir(ns, vol["persistentVolumeClaim"]["claimName"])
        elif "hostPath" in vol:
            out[name] = Path(vol["hostPath"]["path"])
        elif "secret" in vol:
            src = vol["secret"]
            data = lookup.secret(ns, src["secretName"], bool(src.get("optional")))
            _write_keys(own, data, src.get("items"))
            out[name] = own
        elif "configMap" in vol:
            src = vol["configMap"]
            data = lookup.configmap(ns, src["name"], bool(src.get("optional")))
            _write_keys(own, data, src.get("items"))
            out[name] = own
        else:
            own.mkdir(parents=True, exist_ok=True)
            out[name] = own
    return out


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: Path


class PathMap:
    """A container's view of the file system: its mounts, longest mountPath first."""

    def __init__(self, mounts: list[Mount]) -> None:
        self.mounts = sorted(mounts, key=lambda m: len(m.container_path), reverse=True)

    @classmethod
    def for_container(cls, container: Obj, volumes: dict[str, Path], termination_log: Path) -> PathMap:
        mounts = []
        for vm in container.get("volumeMounts") or ():
            host = volumes[vm["name"]]
            if vm.get("subPath"):
                host = host / vm["subPath"]
                host.mkdir(parents=True, exist_ok=True)  # as the kubelet creates a missing subPath
            mounts.append(Mount(vm["mountPath"].rstrip("/") or "/", host))
        message_path = container.get("terminationMessagePath") or TERMINATION_LOG
        mounts.append(Mount(message_path, termination_log))
        return cls(mounts)

    def host(self, container_path: str) -> Path | None:
        """The host path standing for this container path, or None when no mount covers it."""
        for m in self.mounts:
            if container_path == m.container_path:
                return m.host_path
            prefix = m.container_path if m.container_path.endswith("/") else m.container_path + "/"
            if container_path.startswith(prefix):
                return m.host_path / container_path[len(prefix) :]
        return None

    def rewrite(self, value: str) -> str:
        """`value` itself unless it is a path equal to or under a mountPath."""
        mapped = self.host(value) if value.startswith("/") else None
        return str(mapped) if mapped is not None else value
