"""The `/opt/torchrun` of every worker pod (pure): files in the pods without an image change.

Every worker pod, whatever its workspace source (`none` included), gets:
- the emptyDir `torchrun-tools` (`TOOLS_VOLUME`) mounted read-only at `/opt/torchrun` in the
  torchrun container;
- the init container `prepare` (`PREPARE_CONTAINER`), first of all init containers, from the sync
  image: `python -m controller.sync prepare` copies the package's `controller/tools/` there and
  writes `/opt/torchrun/env` (controller/sync/prepare.py). It runs as the torchrun container does
  (`common.training_security_context`: the queue's securityContext over Pod Security
  `restricted`'s asks), with what other fragments ask of it (`PrepareInputs`: its flags,
  environment and mounts — e.g. the checkpoints volume of `checkpoint.py`);
- the torchrun container's command `LAUNCH_COMMAND` (`/bin/sh /opt/torchrun/launch torchrun`,
  with the same args): `launch` exports the env file's variables, puts `/opt/torchrun/python`
  first on PYTHONPATH and `exec`s torchrun.
Helper modules (`/opt/torchrun/python/torchrun_checkpoint.py`, ...) are importable by the training
program because of that PYTHONPATH.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.api import TorchrunQueue
from controller.sync.protocol import prepare_argv
from controller.torchrunjob.manifests.common import training_security_context

TOOLS_VOLUME = "torchrun-tools"
TOOLS_DIR = "/opt/torchrun"
PREPARE_CONTAINER = "prepare"
LAUNCH_COMMAND: tuple[str, ...] = ("/bin/sh", f"{TOOLS_DIR}/launch", "torchrun")


@dataclass(frozen=True)
class PrepareInputs:
    """What other fragments add to the `prepare` container."""

    args: list[str] = field(default_factory=list)
    env: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    env_from: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class WorkerTools:
    """The tools fragment of a worker pod (module doc)."""

    volume: dict[str, Any]
    mount: dict[str, Any]  # of the torchrun container
    init_container: dict[str, Any]
    command: list[str]


def worker_tools(queue: TorchrunQueue, *, image: str, inputs: PrepareInputs | None = None) -> WorkerTools:
    """The `torchrun-tools` volume, its mount, the `prepare` init container and the command."""
    inputs = inputs or PrepareInputs()
    prepare = {
        "name": PREPARE_CONTAINER,
        "image": image,
        "command": [*prepare_argv(target=TOOLS_DIR), *inputs.args],
        "volumeMounts": [{"name": TOOLS_VOLUME, "mountPath": TOOLS_DIR}, *inputs.mounts],
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "1", "memory": "256Mi"},
        },
        "securityContext": training_security_context(queue),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if inputs.env:
        prepare["env"] = list(inputs.env)
    if inputs.env_from:
        prepare["envFrom"] = list(inputs.env_from)
    return WorkerTools(
        volume={"name": TOOLS_VOLUME, "emptyDir": {}},
        mount={"name": TOOLS_VOLUME, "mountPath": TOOLS_DIR, "readOnly": True},
        init_container=prepare,
        command=list(LAUNCH_COMMAND),
    )
