"""When a job runs a workspace generation: what `kubectl torchrun sync` waits for after the upload.

A generation being in use (`status.workspaceGeneration`) only means it was synced; the workers
that ran the old code are then evicted and the worker Job makes new ones, which takes a while
(the old pods must stop first). `on_generation` says the job runs generation G only when all of
this holds, and otherwise says which part it still waits for:
  * `status.workspaceGeneration` ≥ G and `status.workspaceSyncTime` is set (a generation that
    failed to sync, reason `ReloadFailed`, ends the wait with that reason);
  * the job's current worker Job exists (the Job named like the job, controlled by it);
  * `status.nodes` of that Job's pods are Running, not terminating, and run the generation: each
    was created after `workspaceSyncTime` (the controller evicts every pod created at or before
    it), or the Job itself was made for the generation in use (its
    `torchrun.ai/workspace-generation` annotation).
A suspended job has no workers to wait for: it runs the generation once resumed, and says so.
A job reloaded in place (`status.inPlaceWorkspaceGeneration` ≥ G: its pods stay, each
supervisor copies the code and starts a fresh torchrun) runs G once every rank's supervisor said
it runs the in-place generation named for it (`inPlaceRunningGeneration` ≥ `inPlaceGeneration`).
`on_generation` is pure (the job, its worker Job and pods in; a line or a `Waiting` out);
`runs_generation` reads them from the API for `watch.wait`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from controller.api import WORKER_ROLE, JobConditionType, parse_time
from controller.api.labels import annotated_generation
from controller.api.reasons import Reason
from controller.meta import is_controlled_by
from controller.plugin.errors import PluginError
from controller.plugin.kube import Kube
from controller.plugin.objects import JSON, get_worker_job, job_pods
from controller.plugin.watch import Waiting, condition
from controller.pods import ENDED_PHASES, unschedulable


def _not_in_use(job: JSON, generation: int) -> Waiting:
    """Generation `generation` is not in use yet: the WorkspaceReady condition says why."""
    ready = condition(job, JobConditionType.WORKSPACE_READY) or {}
    wanted = ((job.get("spec") or {}).get("workspace") or {}).get("generation", 0)
    if ready.get("reason") == Reason.RELOAD_FAILED.value and wanted == generation:
        raise PluginError(f"generation {generation} did not sync: {ready.get('message', '')}")
    said = f"{ready.get('reason', '')}: {ready.get('message', '')}".strip(": ")
    return Waiting(f"generation {generation} is not in use yet ({said or 'no word from the controller'})")


def in_use(job: JSON) -> int | None:
    """The generation the job's workspace holds once one was synced (`workspaceSyncTime` set)."""
    status = job.get("status") or {}
    if status.get("workspaceSyncTime") is None:
        return None
    return int(status.get("workspaceGeneration") or 0)


def on_generation(job: JSON, worker_job: JSON | None, pods: Sequence[JSON], generation: int) -> str | Waiting:
    """The line saying the job runs `generation` (or a later one), or what it still waits for
    (see the module docstring)."""
    name, uid = job["metadata"]["name"], job["metadata"].get("uid", "")
    status = job.get("status") or {}
    current = in_use(job)
    if current is None or current < generation:
        return _not_in_use(job, generation)
    if (job.get("spec") or {}).get("suspend"):
        return f"job {name} is suspended: it runs generation {current} once resumed"
    if worker_job is None or not is_controlled_by(worker_job, uid):
        return Waiting(f"generation {current} is in use; the worker Job {name} does not exist yet")
    synced_at = parse_time(status["workspaceSyncTime"])
    made_for_it = annotated_generation(worker_job) >= current
    if not made_for_it and int(status.get("inPlaceWorkspaceGeneration") or 0) >= current:
        return _in_place(name, status, current)

    def runs_it(pod: JSON) -> bool:
        return (
            is_controlled_by(pod, worker_job["metadata"]["uid"])
            and not pod["metadata"].get("deletionTimestamp")
            and (made_for_it or parse_time(pod["metadata"]["creationTimestamp"]) > synced_at)
        )

    new = [p for p in pods if runs_it(p)]
    running = [p for p in new if (p.get("status") or {}).get("phase") == "Running"]
    nodes = int(status.get("nodes") or 0)
    if nodes and len(running) == nodes:
        return f"job {name} runs generation {current}"
    return Waiting(_workers_line(current, nodes, new, running, [p for p in pods if not runs_it(p)]))


def _in_place(name: str, status: JSON, current: int) -> str | Waiting:
    """A reload in place asked for `current`: done once every rank's supervisor said it runs the
    in-place generation named for it (or a later one)."""
    asked = int(status.get("inPlaceGeneration") or 0)
    running = status.get("inPlaceRunningGeneration")
    if isinstance(running, int) and running >= asked:
        return f"job {name} runs generation {current} (reloaded in place: the pods stayed)"
    return Waiting(
        f"generation {current}: every worker restarts on it in place (in-place generation {asked})"
    )


def _workers_line(
    generation: int, nodes: int, new: Sequence[JSON], running: Sequence[JSON], others: Sequence[JSON]
) -> str:
    line = f"generation {generation}: {len(running)}/{nodes} worker pods started on it are Running"
    starting = [p for p in new if (p.get("status") or {}).get("phase") not in ("Running", *ENDED_PHASES)]
    if starting:
        line += f", {len(starting)} starting"
        blocked = unschedulable(starting)
        line += f" ({blocked})" if blocked else ""
    old = [
        p
        for p in others
        if p["metadata"].get("deletionTimestamp") or (p.get("status") or {}).get("phase") not in ENDED_PHASES
    ]
    if old:
        line += f"; {len(old)} worker pod(s) of the older code not gone yet"
    return line


def runs_generation(kube: Kube, generation: int) -> Callable[[JSON], str | Waiting]:
    """`watch.wait`'s check for `on_generation`: reads the job's worker Job and worker pods once
    the generation is in use."""

    def check(job: JSON) -> str | Waiting:
        current = in_use(job)
        if current is None or current < generation:
            return on_generation(job, None, (), generation)  # nothing to read yet
        name = job["metadata"]["name"]
        return on_generation(job, get_worker_job(kube, name), job_pods(kube, name, WORKER_ROLE), generation)

    return check
