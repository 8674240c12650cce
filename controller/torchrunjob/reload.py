"""Hot reload, the controller's side: the workers move to the generation in use together.

`HotReload.roll(raw, attempt, status)` evicts the live worker pods of the attempt that were made
before the generation in use (`status.workspaceGeneration`) was synced, when the worker Job was
made for an older one — so all workers restart onto it together without touching the Job, the
PVCs or the Service: evicted pods carry the DisruptionTarget condition, which the worker Job's
podFailurePolicy ignores (`evictions.py`). The pods are the attempt's (`Attempt.pods`, listed
once per pass by `workers.py`), never listed again here. When it evicted any, it records one
Normal `WorkspaceReloaded` Event on `raw`, the job as the pass read it (the job may be gone from
the cache by then). Returns how many it evicted.

A job that restarts in place (`inplace.py`) evicts nothing: `HotReload.in_place` answers the next
in-place generation instead (`reload_in_place`: `status.inPlaceWorkspaceGeneration` remembers the
workspace generation asked for, so each is asked once), and every supervisor copies the newest
generation into its code directory before its fresh torchrun (`torchrun_workspace.py`).
"""

from __future__ import annotations

from datetime import datetime

from controller.api import TorchrunJobStatus
from controller.api.labels import annotated_generation
from controller.api.reasons import Reason
from controller.meta import Obj
from controller.rest.client import RESTClient
from controller.runtime.events import NORMAL, EventRecorder
from controller.torchrunjob.disruption import rolled_by_reload
from controller.torchrunjob.evictions import evict_live_workers
from controller.torchrunjob.steps import Decision
from controller.torchrunjob.workers import Attempt


def reload_in_place(generation_made_for: int, status: TorchrunJobStatus, now: datetime) -> Decision | None:
    """For a job that restarts in place: the next in-place generation when a workspace generation
    was synced that neither the worker Job was made for (`generation_made_for`) nor an earlier
    reload in place asked for — the supervisors copy it and start a fresh torchrun, no pod goes;
    not counted as a restart. None when there is nothing to reload."""
    asked = max(generation_made_for, status.in_place_workspace_generation)
    if status.workspace_sync_time is None or status.workspace_generation <= asked:
        return None
    generation = status.in_place_generation + 1
    changes = {
        "in_place_generation": generation,
        "in_place_restart_time": now,
        "in_place_workspace_generation": status.workspace_generation,
    }
    return Decision(changes=changes)


class HotReload:
    def __init__(self, client: RESTClient, recorder: EventRecorder) -> None:
        self.client = client
        self.recorder = recorder

    def roll(self, raw: Obj, attempt: Attempt, status: TorchrunJobStatus) -> int:
        made_for = annotated_generation(attempt.job)
        if status.workspace_sync_time is None or status.workspace_generation <= made_for:
            return 0
        evicted = evict_live_workers(
            self.client, attempt.pods, attempt.job, lambda pod: rolled_by_reload(pod, status, made_for)
        )
        if evicted:
            message = (
                f"workspace generation {status.workspace_generation} synced: restarting {evicted} worker "
                "pod(s) onto it together (the Job, PVCs and Service stay)"
            )
            self.recorder.event(raw, NORMAL, Reason.WORKSPACE_RELOADED, message)
        return evicted

    def in_place(
        self, raw: Obj, attempt: Attempt, status: TorchrunJobStatus, now: datetime
    ) -> Decision | None:
        """`reload_in_place` for the attempt's worker Job, with one Normal `WorkspaceReloaded`
        Event on `raw` when it asks for a reload."""
        decided = reload_in_place(annotated_generation(attempt.job), status, now)
        if decided is not None:
            message = (
                f"workspace generation {status.workspace_generation} synced: every worker restarts "
                f"on it in place (generation {decided.changes['in_place_generation']}; the pods stay)"
            )
            self.recorder.event(raw, NORMAL, Reason.WORKSPACE_RELOADED, message)
        return decided
