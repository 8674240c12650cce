"""Hot reload, the controller's side: the workers move to the generation in use together.

`HotReload.roll(raw, attempt, status)` evicts the live worker pods of the attempt that were made
before the generation in use (`status.workspaceGeneration`) was synced, when the worker Job was
made for an older one — so all workers restart onto it together without touching the Job, the
PVCs or the Service: evicted pods carry the DisruptionTarget condition, which the worker Job's
podFailurePolicy ignores (`evictions.py`). The pods are the attempt's (`Attempt.pods`, listed
once per pass by `workers.py`), never listed again here. When it evicted any, it records one
Normal `WorkspaceReloaded` Event on `raw`, the job as the pass read it (the job may be gone from
the cache by then). Returns how many it evicted.
"""

from __future__ import annotations

from controller.api import TorchrunJobStatus, parse_time
from controller.api.reasons import Reason
from controller.meta import Obj
from controller.rest.client import RESTClient
from controller.runtime.events import NORMAL, EventRecorder
from controller.torchrunjob.evictions import evict_live_workers
from controller.torchrunjob.generations import generation_of
from controller.torchrunjob.workers import Attempt


class HotReload:
    def __init__(self, client: RESTClient, recorder: EventRecorder) -> None:
        self.client = client
        self.recorder = recorder

    def roll(self, raw: Obj, attempt: Attempt, status: TorchrunJobStatus) -> int:
        synced_at = status.workspace_sync_time
        if synced_at is None or status.workspace_generation <= generation_of(attempt.job):
            return 0
        evicted = evict_live_workers(
            self.client,
            attempt.pods,
            attempt.job,
            lambda pod: parse_time(pod["metadata"]["creationTimestamp"]) <= synced_at,
        )
        if evicted:
            message = (
                f"workspace generation {status.workspace_generation} synced: restarting {evicted} worker "
                "pod(s) onto it together (the Job, PVCs and Service stay)"
            )
            self.recorder.event(raw, NORMAL, Reason.WORKSPACE_RELOADED, message)
        return evicted
