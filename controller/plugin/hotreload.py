"""`kubectl torchrun sync NAME`: hot reload — a new generation of the code into a running job.

Content-addressed: when the directory's archive has the SHA-256 the job already runs
(`status.workspaceSha256`) nothing is sent and nothing changes. Otherwise the generation to fill
is chosen so a retry never skips or wastes one:
  * the wanted generation (`spec.workspace.generation`) is still unpublished and its sync pod is
    waiting for an upload (a failed or interrupted upload) → upload into it;
  * else → raise `spec.workspace.generation` by one (a merge patch carrying the resourceVersion
    read, so two concurrent syncs cannot both claim the same generation) and upload into the new
    sync pod.
The upload is a delta (`controller.plugin.delta`): the tree's manifest goes first and only the
files the workspace does not already hold follow, so a one-line edit sends a few kilobytes; the
whole archive goes when there is no published generation to start from or the delta fails.
Sources other than upload (git, s3, pvc) have nothing to send: the increment alone makes the
sync pod fetch again. Unless `--detach`, it then waits until the workers run the new generation
(`rollout.on_generation`: the generation is in use and the job's node count of worker pods
created after it was synced are Running; in place, every rank's supervisor runs it), saying what
it waits for meanwhile, and then how long that took from the command's start.
"""

from __future__ import annotations

import time
from pathlib import Path

from controller.plugin.console import Console
from controller.plugin.errors import PluginError
from controller.plugin.kube import Kube
from controller.plugin.objects import JSON, get_job, get_pod, patch_job
from controller.plugin.rollout import runs_generation
from controller.plugin.watch import pod_ended, wait
from controller.plugin.workspace import packed, send_generation, wanted_generation, workspace_source
from controller.rest.errors import ApiError
from controller.sync.protocol import sync_pod_name


def _published(job: JSON) -> tuple[int, str | None]:
    status = job.get("status") or {}
    return int(status.get("workspaceGeneration") or 0), status.get("workspaceSha256")


def _upload_pending(kube: Kube, job: JSON) -> bool:
    """The wanted generation is unpublished and its sync pod still waits for an upload."""
    wanted = wanted_generation(job)
    generation, sha = _published(job)
    if sha is not None and generation >= wanted:
        return False
    pod = get_pod(kube, sync_pod_name(job["metadata"]["name"], wanted))
    return pod is not None and pod_ended(pod) is None


CLAIM_ATTEMPTS = 5


def next_generation(kube: Kube, job: JSON) -> int:
    """Claim the next generation: `spec.workspace.generation` + 1, conditional on the job not
    having changed since it was read; the generation claimed. A conflict (the controller wrote the
    job's status meanwhile, or another sync claimed a generation) reads the job again and claims
    the next one from there, up to `CLAIM_ATTEMPTS` tries in all (client-go's RetryOnConflict)."""
    for _ in range(CLAIM_ATTEMPTS - 1):
        try:
            return _claim(kube, job)
        except ApiError as exc:
            if not exc.conflict:
                raise
        job = get_job(kube, job["metadata"]["name"])
    return _claim(kube, job)


def _claim(kube: Kube, job: JSON) -> int:
    generation = wanted_generation(job) + 1
    patch = {
        "metadata": {"resourceVersion": job["metadata"]["resourceVersion"]},
        "spec": {"workspace": {"generation": generation}},
    }
    patch_job(kube, job["metadata"]["name"], patch)
    return generation


def sync(kube: Kube, name: str, root: Path, console: Console, *, force: bool, detach: bool) -> int:
    """Run `sync` (see the module docstring); the exit code."""
    started = time.monotonic()
    job = get_job(kube, name)
    source = workspace_source(job)
    if source == "none":
        raise PluginError(f"job {name} has no workspace (source none): its code is in the image")
    if source != "upload":
        generation = next_generation(kube, job)
        console.say(f"generation {generation}: the sync pod fetches again from {source}")
    else:
        with packed(root, force) as pack:
            generation, sha = _published(job)
            if sha == pack.archive.sha256:
                console.say(f"nothing changed: job {name} already runs this tree (generation {generation})")
                return 0
            generation = wanted_generation(job) if _upload_pending(kube, job) else next_generation(kube, job)
            send_generation(kube, name, generation, pack, console, delta=True)
    if detach:
        return 0
    said = wait(kube, name, runs_generation(kube, generation), console.say)
    console.say(f"{said}; {time.monotonic() - started:.1f} s after the command")
    return 0
