"""`kubectl torchrun checkpoints NAME`: every entry of the job's checkpoint root — step, time, size,
complete or not (docs/checkpoints.md) — read by a short-lived pod.

The volume may be mounted nowhere else right now (a suspended or finished job), so the plugin runs
`python -m controller.sync checkpoints --root <mount path>` in a pod of its own,
`<job>-checkpoints-<5 hex>` (`listing_pod`, pure): the image and securityContext of the worker pods'
`prepare` container (the sync image the controller chose), the worker pods' placement (nodeSelector,
tolerations, affinity, imagePullSecrets, schedulerName) and their `checkpoints` volume, mounted
read-only at the same path; the RuntimeDefault seccomp profile, no privilege escalation and no
capabilities unless the queue's context says otherwise; owned (not controlled) by the TorchrunJob,
so it goes with the job if the plugin dies. The plugin waits up to `TIMEOUT` seconds for it to end,
reads its log and deletes it. One line instead when the job has no worker Job to take these from, or
no checkpoints volume.
"""

from __future__ import annotations

import datetime
import secrets
import time
from typing import Any

from controller.api import API_VERSION, JOB_KIND
from controller.checkpoint.listing import Listed, from_json
from controller.plugin.console import Console
from controller.plugin.errors import PluginError
from controller.plugin.kube import USER_AGENT, Kube
from controller.plugin.objects import JSON, get_job, get_pod, get_worker_job
from controller.plugin.views import table
from controller.rest.errors import ApiError
from controller.rest.resources import PODS
from controller.sync.protocol import checkpoints_argv

VOLUME = "checkpoints"
PREPARE = "prepare"
TIMEOUT = 120.0
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
_PLACEMENT = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "imagePullSecrets",
    "schedulerName",
    "priorityClassName",
)


def listing_pod(job: JSON, worker_job: JSON, suffix: str) -> JSON:
    """The listing pod of the module doc; `PluginError` when the worker Job lacks what it needs."""
    name = job["metadata"]["name"]
    template = ((worker_job.get("spec") or {}).get("template") or {}).get("spec") or {}
    volume = next((v for v in template.get("volumes") or () if v.get("name") == VOLUME), None)
    prepare = next((c for c in template.get("initContainers") or () if c.get("name") == PREPARE), None)
    mount = next((m for m in (prepare or {}).get("volumeMounts") or () if m.get("name") == VOLUME), None)
    if volume is None or prepare is None or mount is None:
        raise PluginError(f"job {name} has no checkpoints volume (its queue's storage.checkpoints.enabled)")
    owner = {"apiVersion": API_VERSION, "kind": JOB_KIND, "name": name, "uid": job["metadata"]["uid"]}
    container: dict[str, Any] = {
        "name": "list",
        "image": prepare["image"],
        "command": checkpoints_argv(root=mount["mountPath"]),
        "volumeMounts": [{"name": VOLUME, "mountPath": mount["mountPath"], "readOnly": True}],
        "resources": prepare.get("resources") or {},
    }
    # what Pod Security's `restricted` level asks, unless the queue's own context says otherwise
    container["securityContext"] = {**RESTRICTED, **(prepare.get("securityContext") or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-checkpoints-{suffix}",
            "labels": {"torchrun.ai/checkpoints-of": name},
            "ownerReferences": [owner],
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": int(TIMEOUT),
            "automountServiceAccountToken": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
            "volumes": [_read_only(volume)],
            **{k: template[k] for k in _PLACEMENT if template.get(k)},
        },
    }


def _read_only(volume: JSON) -> JSON:
    claim = volume.get("persistentVolumeClaim")
    return {**volume, "persistentVolumeClaim": {**claim, "readOnly": True}} if claim else dict(volume)


def _size(n: int) -> str:
    """Bytes as people read them: `12 B`, `3.0 MiB`."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def listing_table(items: list[Listed]) -> str:
    """The entries as `kubectl torchrun checkpoints` prints them, newest first."""
    rows = [
        (
            i.name.encode("unicode_escape").decode("ascii"),  # a hostile name stays on one line
            "-" if i.step is None else i.step,
            datetime.datetime.fromtimestamp(i.time, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            _size(i.bytes),
            f"yes ({i.kind})" if i.complete else "no",
        )
        for i in items
    ]
    return table(("NAME", "STEP", "TIME", "SIZE", "COMPLETE"), rows)


def _wait(kube: Kube, name: str) -> JSON:
    deadline = time.monotonic() + TIMEOUT
    while True:
        pod = get_pod(kube, name) or {}
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return pod
        if time.monotonic() >= deadline:
            phase = (pod.get("status") or {}).get("phase", "gone")
            raise PluginError(
                f"pod {name} did not finish listing the checkpoints within {TIMEOUT:g} s ({phase})"
            )
        time.sleep(0.5)


def checkpoints_command(kube: Kube, console: Console, name: str) -> int:
    job = get_job(kube, name)
    worker_job = get_worker_job(kube, name)
    if worker_job is None:
        raise PluginError(f"job {name} has no worker Job yet: its checkpoints volume is not known")
    pod = listing_pod(job, worker_job, secrets.token_hex(3)[:5])
    pod_name = pod["metadata"]["name"]
    uid = kube.create(PODS, pod, kube.namespace, field_manager=USER_AGENT)["metadata"]["uid"]
    try:
        ended = _wait(kube, pod_name)
        text = b"".join(kube.open_lines(PODS, pod_name, "log", {"container": "list"})).decode(
            errors="replace"
        )
        if ended["status"]["phase"] != "Succeeded":
            raise PluginError(f"pod {pod_name} could not list the checkpoints: {text.strip()[-500:]}")
    finally:
        try:
            # the pod this call created, and no other of its name (UID precondition: 409 if replaced)
            kube.delete(PODS, pod_name, kube.namespace, grace_period_seconds=0, uid=uid)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise
    items = from_json(text.strip().splitlines()[-1] if text.strip() else "")
    console.line(listing_table(items) if items else f"no checkpoints in job {name}'s volume")
    return 0
