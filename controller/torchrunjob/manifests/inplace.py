"""The in-place restart fragment of a worker pod (pure; docs/design/recovery.md).

`in_place_on(job, reporter)`: the job restarts in place — `failurePolicy.restartMode: InPlace` and
a controller with a progress endpoint (`ReporterSettings.url`: the only way its word reaches the
pods). Without an endpoint an InPlace job restarts by recreating, as a Recreate job does.

`with_in_place(pod, job, container)` returns the worker pod spec (already `with_reporter`'s) with:
- in the torchrun container, `TORCHRUN_IN_PLACE=1` (`launch` runs the supervisor,
  `tools/python/torchrun_supervisor.py`), where the supervisor reads the controller's word
  (`CONTROL_FILE`) and writes its state (`STATE_FILE`, in the progress volume the sidecar reads),
  the permanent exit codes (the supervisor ends the pod with one at once, so podFailurePolicy
  fails the job as before) and torchrun's own `--max_restarts` at 0 (torchrun's in-place restart is
  not reliable: docs/design/recovery.md; the supervisor's fresh torchrun replaces it);
- for a job with a workspace, the workspace PVC read-only at `WORKSPACE_DIR` in the torchrun
  container and where its code directory is: the supervisor copies a newer generation there
  before a later generation starts (a hot reload in place, `torchrun_workspace.py`);
- the emptyDir `torchrun-control` at `CONTROL_DIR`: written by the reporter sidecar only,
  read-only in the torchrun container, so the training code cannot forge the word;
- the sidecar's environment naming both files.
No privilege, no shared process namespace: Pod Security `restricted` admits it.
"""

from __future__ import annotations

from typing import Any

from controller.api import RestartMode, TorchrunJob
from controller.torchrunjob.manifests.progress import PROGRESS_DIR, REPORTER_CONTAINER, ReporterSettings
from controller.torchrunjob.manifests.storage import WORKSPACE_VOLUME, has_workspace

CONTROL_VOLUME = "torchrun-control"
CONTROL_DIR = "/var/run/torchrun-control"
CONTROL_FILE = f"{CONTROL_DIR}/generation.json"
STATE_FILE = f"{PROGRESS_DIR}/supervisor.json"
WORKSPACE_DIR = "/var/run/torchrun-workspace"  # the workspace PVC, read-only, for reloads in place
# a newer generation stops torchrun with SIGTERM, then SIGKILL after this long (the supervisor's
# KILL_AFTER, which the pod does not override): every rank starts the new one within it
KILL_GRACE_SECONDS = 10.0


def in_place_on(job: TorchrunJob, reporter: ReporterSettings) -> bool:
    """The job restarts in place (module doc)."""
    return job.spec.failure_policy.restart_mode == RestartMode.IN_PLACE and bool(reporter.url)


def _files() -> list[dict[str, Any]]:
    return [
        {"name": "TORCHRUN_IN_PLACE", "value": "1"},
        {"name": "TORCHRUN_CONTROL_FILE", "value": CONTROL_FILE},
        {"name": "TORCHRUN_SUPERVISOR_FILE", "value": STATE_FILE},
    ]


def _code(job: TorchrunJob) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The environment and mount that let the supervisor copy a newer workspace generation into
    the code directory (a hot reload in place); none for a job without a workspace."""
    if not has_workspace(job):
        return [], []
    env = [
        {"name": "TORCHRUN_WORKSPACE_DIR", "value": WORKSPACE_DIR},
        {"name": "TORCHRUN_CODE_DIR", "value": job.spec.workspace.mount_path},
    ]
    return env, [{"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_DIR, "readOnly": True}]


def _torchrun(container: dict[str, Any], job: TorchrunJob) -> dict[str, Any]:
    codes = " ".join(str(c) for c in sorted(job.spec.failure_policy.permanent_exit_codes))
    code_env, code_mounts = _code(job)
    env = [
        e if e["name"] != "PET_MAX_RESTARTS" else {"name": "PET_MAX_RESTARTS", "value": "0"}
        for e in container.get("env", ())
    ]
    args = [
        a if not a.startswith("--max_restarts=") else "--max_restarts=0" for a in container.get("args", ())
    ]
    mount = {"name": CONTROL_VOLUME, "mountPath": CONTROL_DIR, "readOnly": True}
    return {
        **container,
        "args": args,
        "env": [*env, *_files(), {"name": "TORCHRUN_PERMANENT_EXIT_CODES", "value": codes}, *code_env],
        "volumeMounts": [*container.get("volumeMounts", ()), mount, *code_mounts],
    }


def _sidecar(container: dict[str, Any]) -> dict[str, Any]:
    mount = {"name": CONTROL_VOLUME, "mountPath": CONTROL_DIR}
    return {
        **container,
        "env": [*container.get("env", ()), *_files()],
        "volumeMounts": [*container.get("volumeMounts", ()), mount],
    }


def with_in_place(pod: dict[str, Any], job: TorchrunJob, container: str) -> dict[str, Any]:
    """`pod` with the fragment of the module doc; `container` names the torchrun container.
    `pod` is not changed."""
    return {
        **pod,
        "containers": [_torchrun(c, job) if c["name"] == container else c for c in pod["containers"]],
        "initContainers": [
            _sidecar(c) if c["name"] == REPORTER_CONTAINER else c for c in pod.get("initContainers", ())
        ],
        "volumes": [
            *pod.get("volumes", ()),
            {"name": CONTROL_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        ],
    }
