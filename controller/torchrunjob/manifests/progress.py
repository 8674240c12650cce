"""The progress reporter of every worker pod (pure): a native sidecar from the controller's image.

`with_reporter(pod, ...)` returns the worker pod spec with:
- the emptyDir `torchrun-progress` at `PROGRESS_DIR` in the torchrun container, whose
  environment gets `TORCHRUN_PROGRESS_FILE` (`PROGRESS_FILE`: the JSON-lines file the training
  program appends to; `torchrun_progress.report` does it);
- the init container `progress-reporter` (`REPORTER_CONTAINER`) with `restartPolicy: Always` — a
  native sidecar: started before the torchrun container, stopped after it, never holding the
  pod's completion — running `python -m controller.progress.sidecar.reporter` from the sync
  image. It tails the file (read-only mount), serves `/metrics` on port `METRICS_PORT` (named
  `progress`, what config/prometheus' PodMonitor scrapes), and, when the controller has
  an endpoint (`ReporterSettings.url`), POSTs the latest record there with the projected
  service-account token at `TOKEN_PATH` (audience `torchrun-controller`, 10 minutes, refreshed
  by the kubelet), verifying the endpoint with `ReporterSettings.ca` when the controller has one;
  with the queue's checkpoints volume, that volume read-only at its mount path
  (`TORCHRUN_CHECKPOINT_DIR`): rank 0's sidecar tells the newest checkpoint with its reports;
- with the queue's `debug.stackDumps: true` only, `shareProcessNamespace: true`, so
  `kubectl torchrun stack` can run py-spy in the sidecar against the training processes (without
  it the containers see only their own processes). With `debug.stackDumps: true` (off by default:
  Pod Security's baseline and restricted levels refuse the capability) only the sidecar gets
  `SYS_PTRACE` (as UID 0, every other capability dropped: ptrace of another user's process
  needs the capability in effect, which a non-root container never has); without it the
  sidecar runs as 65532 with no capability and the RuntimeDefault seccomp profile, as Pod
  Security's `restricted` level asks. The torchrun container never gets one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.api import TorchrunJob, TorchrunQueue
from controller.api.torchrunqueue import RESERVED_PER_WORKER_POD
from controller.torchrunjob.manifests.storage import CHECKPOINTS_VOLUME

REPORTER_CONTAINER = "progress-reporter"
PROGRESS_VOLUME = "torchrun-progress"
PROGRESS_DIR = "/var/run/torchrun-progress"
PROGRESS_FILE = f"{PROGRESS_DIR}/progress.jsonl"
TOKEN_VOLUME = "torchrun-progress-token"
TOKEN_DIR = "/var/run/secrets/torchrun-progress"
TOKEN_PATH = f"{TOKEN_DIR}/token"
AUDIENCE = "torchrun-controller"
TOKEN_SECONDS = 600  # the shortest the API server allows
METRICS_PORT = 9400
REPORTER_COMMAND = ("python", "-m", "controller.progress.sidecar.reporter")


@dataclass(frozen=True)
class ReporterSettings:
    """What the controller tells every reporter: its endpoint's URL (`--progress-url`; empty:
    no pushes) and the CA that signed the endpoint's certificate (PEM; None: not verified)."""

    url: str = ""
    ca: str | None = None


def stack_dumps_allowed(queue: TorchrunQueue) -> bool:
    """Only a queue that says `debug.stackDumps: true` gets a ptrace-capable sidecar (module doc)."""
    return queue.spec.debug is not None and queue.spec.debug.stack_dumps


def reporter_container(
    job: TorchrunJob, queue: TorchrunQueue, image: str, settings: ReporterSettings
) -> dict[str, Any]:
    """The sidecar (module doc)."""
    env: list[dict[str, Any]] = [
        {"name": "TORCHRUN_PROGRESS_FILE", "value": PROGRESS_FILE},
        {"name": "TORCHRUN_PROGRESS_TOKEN_FILE", "value": TOKEN_PATH},
        {"name": "TORCHRUN_JOB_NAME", "value": job.name},
        {"name": "TORCHRUN_REPORTER_ADDRESS", "value": f"0.0.0.0:{METRICS_PORT}"},
    ]
    if settings.url:
        env.append({"name": "TORCHRUN_PROGRESS_URL", "value": settings.url})
    if settings.ca:
        env.append({"name": "TORCHRUN_PROGRESS_CA", "value": settings.ca})
    checkpoints = queue.spec.storage.checkpoints
    mounts: list[dict[str, Any]] = []
    if checkpoints.enabled:  # rank 0's sidecar tells the newest checkpoint (progress/saved.py)
        env.append({"name": "TORCHRUN_CHECKPOINT_DIR", "value": checkpoints.mount_path})
        mounts.append({"name": CHECKPOINTS_VOLUME, "mountPath": checkpoints.mount_path, "readOnly": True})
    if stack_dumps_allowed(queue):
        security: dict[str, Any] = {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["SYS_PTRACE"]},
        }
    else:
        security = {
            "runAsUser": 65532,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},  # all Pod Security `restricted` asks of it
        }
    return {
        "name": REPORTER_CONTAINER,
        "image": image,
        "restartPolicy": "Always",
        "command": list(REPORTER_COMMAND),
        "env": env,
        "ports": [{"name": "progress", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "volumeMounts": [
            {"name": PROGRESS_VOLUME, "mountPath": PROGRESS_DIR, "readOnly": True},
            {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True},
            *mounts,
        ],
        "resources": {
            # all the controller reserves of a worker pod's nodeResources (podresources.py)
            "requests": dict(RESERVED_PER_WORKER_POD),
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        "securityContext": security,
    }


def with_reporter(
    pod: dict[str, Any],
    job: TorchrunJob,
    queue: TorchrunQueue,
    *,
    image: str,
    settings: ReporterSettings,
    container: str,
) -> dict[str, Any]:
    """`pod` (a worker pod spec) with the reporter, its volumes and the torchrun container's
    file (module doc); `container` names the torchrun container. `pod` is not changed."""
    mount = {"name": PROGRESS_VOLUME, "mountPath": PROGRESS_DIR}
    file = {"name": "TORCHRUN_PROGRESS_FILE", "value": PROGRESS_FILE}
    containers = [
        {**c, "env": [*c.get("env", ()), file], "volumeMounts": [*c.get("volumeMounts", ()), mount]}
        if c["name"] == container
        else c
        for c in pod["containers"]
    ]
    token = {
        "serviceAccountToken": {"audience": AUDIENCE, "expirationSeconds": TOKEN_SECONDS, "path": "token"}
    }
    shared = {"shareProcessNamespace": True} if stack_dumps_allowed(queue) else {}
    return {
        **pod,
        **shared,
        "containers": containers,
        "initContainers": [*pod.get("initContainers", ()), reporter_container(job, queue, image, settings)],
        "volumes": [
            *pod.get("volumes", ()),
            {"name": PROGRESS_VOLUME, "emptyDir": {}},
            # readable by the sidecar whatever user it runs as (only the sidecar mounts it): the
            # kubelet writes it 0600 for root when the pod's containers run as different users
            {"name": TOKEN_VOLUME, "projected": {"sources": [token], "defaultMode": 0o444}},
        ],
    }
