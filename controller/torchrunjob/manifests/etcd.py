"""The managed etcd of etcd-v2 rendezvous (pure): its Pod and Service, and what its pod says.

torchrun's `etcd-v2` rendezvous speaks etcd's v2 API, which etcd 3.6 removed, so a job with
`rdzvBackend: etcd-v2` and no `rdzvEndpoint` gets an etcd 3.5 of its own:
- `build_etcd_pod`: pod `<job>-etcd` (role `etcd`, owned by the job), one member with
  `--enable-v2`, data in an emptyDir (rendezvous state lives as long as one attempt, so no fsync),
  modest requests and limits set, non-root with a read-only root filesystem. It is Ready only
  when it answers the v2 API (`/v2/keys`). The image is the queue's `etcdImage`, or etcd at the
  version the tests run (`DEFAULT_ETCD_IMAGE`). It takes the queue's tolerations, priority and
  pull secrets but not its node selection: it needs no GPU and may run on any node. The default
  scheduler places it (it is not a member of the workers' gang).
- `build_etcd_service`: Service `<job>-etcd`, port 2379: the endpoint the workers are given.
- `etcd_state`: Ready, or why not — `Unschedulable` (quoting the scheduler), `EtcdFailing` (a
  container that cannot start: bad image, crash loop; the message names the queue field), or
  `WaitingForEtcd`.
Each whole-job restart gets a fresh etcd (`RESTART_ANNOTATION`): torchrun closes its rendezvous
when an attempt ends, and the next attempt reuses the run id (the job's UID).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.api import ETCD_ROLE, RESTART_ANNOTATION, TorchrunJob, TorchrunQueue, to_json
from controller.api.reasons import Reason
from controller.torchrunjob.manifests.common import labels, object_metadata, placement
from controller.torchrunjob.manifests.rendezvous import ETCD_CLIENT_PORT, etcd_name

CONTAINER = "etcd"
PEER_PORT = 2380
DATA_DIR = "/etcd-data"
READY_PATH = "/v2/keys"
RESOURCES = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"cpu": "1", "memory": "512Mi"},
}
QUOTA_BACKEND_BYTES = 256 * 1024 * 1024  # rendezvous state is a few keys; stay well inside the limit
# container states that will not pass without a change (image, queue): worth a Warning
_STUCK = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


def etcd_args(name: str) -> list[str]:
    """etcd's flags: one member named `name`, clients on every address at 2379, v2 API on."""
    peer = f"http://127.0.0.1:{PEER_PORT}"
    return [
        f"--name={name}",
        f"--data-dir={DATA_DIR}",
        "--enable-v2=true",
        f"--listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT}",
        f"--advertise-client-urls=http://{name}:{ETCD_CLIENT_PORT}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={name}={peer}",
        "--unsafe-no-fsync",
        f"--quota-backend-bytes={QUOTA_BACKEND_BYTES}",
        "--log-level=warn",
    ]


def build_etcd_pod(job: TorchrunJob, queue: TorchrunQueue, *, restart: int = 0) -> dict[str, Any]:
    name = etcd_name(job.name)
    probe = {"httpGet": {"path": READY_PATH, "port": "client"}, "periodSeconds": 2, "failureThreshold": 3}
    container = {
        "name": CONTAINER,
        "image": queue.etcd_image,
        "command": ["/usr/local/bin/etcd"],
        "args": etcd_args(name),
        "ports": [
            {"name": "client", "containerPort": ETCD_CLIENT_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": probe,
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": "client"},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "resources": RESOURCES,
        "volumeMounts": [{"name": "data", "mountPath": DATA_DIR}],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    where = placement(job, queue)
    spec: dict[str, Any] = {
        "restartPolicy": "Always",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}],
        **{k: where[k] for k in ("tolerations", "priorityClassName") if k in where},
    }
    if queue.spec.image_pull_secrets:
        spec["imagePullSecrets"] = [to_json(s) for s in queue.spec.image_pull_secrets]
    meta = object_metadata(job, name, ETCD_ROLE)
    meta["annotations"] = {RESTART_ANNOTATION: str(restart)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def build_etcd_service(job: TorchrunJob) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(job, etcd_name(job.name), ETCD_ROLE),
        "spec": {
            "selector": labels(job, ETCD_ROLE),
            "ports": [
                {"name": "client", "port": ETCD_CLIENT_PORT, "targetPort": "client", "protocol": "TCP"}
            ],
        },
    }


@dataclass(frozen=True)
class EtcdState:
    """Whether the managed etcd answers; if not, the `Running=False` reason and message."""

    ready: bool
    reason: str = ""
    message: str = ""


READY = EtcdState(True)


def etcd_state(pod: Mapping[str, Any] | None, queue: TorchrunQueue) -> EtcdState:
    """What the managed etcd's pod (as cached; None before it exists) says about the etcd."""
    if pod is None:
        return EtcdState(False, Reason.WAITING_FOR_ETCD, "creating the managed etcd for etcd-v2 rendezvous")
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or ()}
    if (conditions.get("Ready") or {}).get("status") == "True" and not pod["metadata"].get(
        "deletionTimestamp"
    ):
        return READY
    scheduled = conditions.get("PodScheduled") or {}
    if scheduled.get("status") == "False" and scheduled.get("reason") == Reason.UNSCHEDULABLE:
        return EtcdState(False, Reason.UNSCHEDULABLE, f"etcd pod {name}: {scheduled.get('message') or ''}")
    for cs in status.get("containerStatuses") or ():
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _STUCK:
            image = queue.etcd_image
            message = (
                f"etcd pod {name}: {waiting['reason']}: {waiting.get('message') or ''} (image {image}: "
                "it must be etcd 3.5, which serves the v2 API; set by the queue's spec.etcdImage)"
            )
            return EtcdState(False, Reason.ETCD_FAILING, message)
    return EtcdState(False, Reason.WAITING_FOR_ETCD, f"waiting for the managed etcd (pod {name}) to be Ready")


def has_ended(pod: Mapping[str, Any]) -> bool:
    """A pod that will never run again (evicted, its node lost): it must be replaced."""
    return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")
