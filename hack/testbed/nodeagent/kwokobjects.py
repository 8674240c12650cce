"""kwok's `Exec` and `Logs` for one pod (pure builders: pod in, manifest out).

Field names as kwok v0.7.0 defines them (sigs.k8s.io/kwok pkg/apis/v1alpha1 exec_types.go,
logs_types.go). kwok finds them by the pod's namespace and name; an entry without `containers`
serves every container. Both are owned by the pod, so the garbage collector removes them with it.

How kwok runs an exec (pkg/kwok/server/debugging_exec.go, pkg/utils/exec): the command from
`kubectl exec` is looked up on *kwok's own* PATH (Go's exec.Command resolves it before the
Exec's `envs` apply), runs in `workDir` with kwok's environment plus `envs`, stdin is piped but
its end is never delivered, and a non-zero exit comes back to the client as an error status.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodeagent.api import EXECS, LOGS

Obj = Mapping[str, Any]


def _owned_by(pod: Obj, kind: str, api_version: str) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
    }


def exec_for(pod: Obj, container: str, work_dir: Path, env: Mapping[str, str]) -> dict[str, Any]:
    obj = _owned_by(pod, EXECS.kind, EXECS.api_version)
    local = {"workDir": str(work_dir), "envs": [{"name": k, "value": v} for k, v in sorted(env.items())]}
    obj["spec"] = {"execs": [{"containers": [container], "local": local}]}
    return obj


def logs_for(pod: Obj, files: Mapping[str, Path]) -> dict[str, Any]:
    """`files`: each container's CRI log file."""
    obj = _owned_by(pod, LOGS.kind, LOGS.api_version)
    obj["spec"] = {"logs": [{"containers": [name], "logsFile": str(path)} for name, path in files.items()]}
    return obj
