"""The sync pod `<job>-sync-<G>`: its manifest and what its status says (pure, no I/O).

`build_sync_pod` runs the sync program's `fetch` (`controller/sync/protocol.py`) for the job's
source and generation G (docs/workspace.md): the workspace PVC read-write at /workspace, for `pvc`
the source claim read-only at /source, for `git` the Secret as files, for `s3` the Secret as
environment. It has no service account token (the sync program needs no API access) and runs as
non-root.

`sync_pod_state` reads a sync pod: synced only when the pod **succeeded and** its termination
message is the sync program's success report **for generation G** (the seed trusted the pod's
success alone); a failed pod gives the sync program's reason. Succeeded means phase `Succeeded`,
or — a second sooner — its one container terminated with exit code 0 while the phase is not yet
terminal: the kubelet reports a container's end at once but the pod's phase only after it stopped
the pod's sandbox (about 1 s on the real node), and with `restartPolicy: Never` that container
never runs again. A pod whose phase is `Failed` never counts, whatever its container said.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.api import (
    GENERATION_ANNOTATION,
    JobTopology,
    TorchrunJob,
    TorchrunQueue,
    WorkspaceSource,
    parse_time,
)
from controller.api.labels import SYNC_ROLE
from controller.sync.errors import SYNC_FAILED
from controller.sync.protocol import CONTAINER, FetchSource, fetch_argv, sync_pod_name
from controller.sync.termination import FAILED, SyncResult, parse_termination_message
from controller.torchrunjob.manifests.common import object_metadata, placement
from controller.torchrunjob.manifests.storage import (
    WORKSPACE_MOUNT,
    WORKSPACE_VOLUME,
    workspace_claim_name,
    workspace_size,
)

SOURCE_MOUNT = "/source"
SECRET_MOUNT = "/var/run/secrets/torchrun.ai/source"
SYNC_USER = 65532  # the controller image's non-root user


def fetch_source(job: TorchrunJob, upload_timeout: float) -> FetchSource:
    """Where the sync pod's `fetch` takes the job's code from, with the source's own flags."""
    ws = job.spec.workspace
    if ws.source is WorkspaceSource.UPLOAD:
        return FetchSource(ws.source.value, timeout=int(upload_timeout))
    if ws.source is WorkspaceSource.GIT and ws.git is not None:
        return FetchSource(ws.source.value, url=ws.git.url, ref=ws.git.ref or None)
    if ws.source is WorkspaceSource.S3 and ws.s3 is not None:
        return FetchSource(ws.source.value, uri=ws.s3.uri)
    if ws.source is WorkspaceSource.PVC and ws.pvc is not None:
        return FetchSource(ws.source.value, sub_path=ws.pvc.sub_path or None)
    return FetchSource(ws.source.value)


def _source_volumes(job: TorchrunJob) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(volumes, mounts, extra container fields) that bring the source's claim or Secret in."""
    ws = job.spec.workspace
    if ws.source is WorkspaceSource.PVC and ws.pvc is not None:
        vol = {"name": "source", "persistentVolumeClaim": {"claimName": ws.pvc.claim_name, "readOnly": True}}
        return [vol], [{"name": "source", "mountPath": SOURCE_MOUNT, "readOnly": True}], {}
    if ws.source is WorkspaceSource.GIT and ws.git is not None and ws.git.secret:
        vol = {"name": "source-secret", "secret": {"secretName": ws.git.secret, "defaultMode": 0o440}}
        return [vol], [{"name": "source-secret", "mountPath": SECRET_MOUNT, "readOnly": True}], {}
    if ws.source is WorkspaceSource.S3 and ws.s3 is not None and ws.s3.secret:
        return [], [], {"envFrom": [{"secretRef": {"name": ws.s3.secret}}]}
    return [], [], {}


def build_sync_pod(
    job: TorchrunJob,
    queue: TorchrunQueue,
    topo: JobTopology,
    *,
    generation: int,
    image: str,
    upload_timeout: float,
) -> dict[str, Any]:
    volumes, mounts, extra = _source_volumes(job)
    source = fetch_source(job, upload_timeout)
    command = fetch_argv(source, generation=generation, max_bytes=workspace_size(queue, topo).value())
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": command,
        "env": [{"name": "TORCHRUN_WORKSPACE", "value": WORKSPACE_MOUNT}],
        "volumeMounts": [{"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_MOUNT}, *mounts],
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"cpu": "2", "memory": "1Gi"},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePolicy": "File",
        **extra,
    }
    meta = object_metadata(job, sync_pod_name(job.name, generation), SYNC_ROLE)
    meta["annotations"] = {GENERATION_ANNOTATION: str(generation)}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsUser": SYNC_USER, "runAsGroup": SYNC_USER, "fsGroup": SYNC_USER},
        "containers": [container],
        "volumes": [
            {
                "name": WORKSPACE_VOLUME,
                "persistentVolumeClaim": {"claimName": workspace_claim_name(job.name)},
            },
            *volumes,
        ],
        **{k: v for k, v in placement(job, queue).items() if k != "priorityClassName"},
    }
    if queue.spec.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s.name} for s in queue.spec.image_pull_secrets]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@dataclass(frozen=True)
class SyncPodState:
    """What a sync pod says: `done` (ended), `result` (the sync program's, once it ended), and
    `finished_at` (when its container ended: worker pods made after it see this generation)."""

    done: bool
    result: SyncResult | None = None
    finished_at: datetime | None = None

    @property
    def synced(self) -> bool:
        return self.result is not None and self.result.succeeded


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if status.get("name") == CONTAINER:
            state: Mapping[str, Any] = (status.get("state") or {}).get("terminated") or {}
            return state
    return {}


def sync_pod_state(pod: Mapping[str, Any], generation: int) -> SyncPodState:
    """Synced only for a pod that succeeded *and* reported the marker of `generation` (module doc)."""
    phase = (pod.get("status") or {}).get("phase")
    term = _terminated(pod)
    exited_0 = phase != "Failed" and term.get("exitCode") == 0
    if phase not in ("Succeeded", "Failed") and not exited_0:
        return SyncPodState(done=False)
    result = parse_termination_message(term.get("message"))
    finished = parse_time(term["finishedAt"]) if term.get("finishedAt") else None
    if result.succeeded and (not exited_0 or result.generation != generation):
        why = (
            f"the sync pod reported generation {result.generation}, not {generation}"
            if result.generation != generation
            else f"the sync pod failed after reporting success ({term.get('reason') or 'no reason'})"
        )
        result = SyncResult(FAILED, generation, reason=SYNC_FAILED, message=why)
    return SyncPodState(done=True, result=result, finished_at=finished)
