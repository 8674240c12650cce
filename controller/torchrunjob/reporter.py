"""What the user reads about a job: its status, written once per pass, and its Events.

`StatusReporter.write(raw, update)` writes the status a pass computed (`status.StatusUpdate`) when
it differs from the stored one, and says whether it did (a 409 is retried with backoff:
`runtime/status.py`); then it records one Event per condition transition worth one
(`status.transition_events`: the severity of each reason is in `api/reasons.py`) and a
`RetriableFailure` Warning when that count grew, and `ResumedFromCheckpoint` /
`CheckpointProblem` when `status.checkpoint` says so (`checkpoints.checkpoint_events`). Nothing
is recorded when nothing was written.
`deprecated_field` is the Warning about the seed's `volumes.workspace` spelling (a hot reload's
Event is `reload.py`'s).
"""

from __future__ import annotations

import structlog

from controller.api import TorchrunJob, to_json
from controller.api.reasons import Reason
from controller.api.resources import TORCHRUNJOBS
from controller.meta import Obj
from controller.rest.client import RESTClient
from controller.runtime.events import NORMAL, WARNING, EventRecorder
from controller.runtime.status import update_status
from controller.torchrunjob import status as st
from controller.torchrunjob.checkpoints import checkpoint_events

log = structlog.get_logger("torchrunjob")


class StatusReporter:
    def __init__(self, client: RESTClient, recorder: EventRecorder) -> None:
        self.client = client
        self.recorder = recorder

    def write(self, raw: Obj, update: st.StatusUpdate) -> bool:
        final = update.final()
        if final == update.job.status:  # unchanged: nothing to serialise or compare as JSON
            return False
        if not update_status(self.client, TORCHRUNJOBS, raw, to_json(final)):
            return False
        stored = update.job.status
        for event in st.transition_events(stored.conditions, final.conditions):
            self.recorder.event(raw, WARNING if event.warning else NORMAL, event.reason, event.message)
        if final.retriable_failures > stored.retriable_failures:
            cap = update.job.spec.failure_policy.max_retriable_failures
            message = (
                f"{final.retriable_failures} pod failure(s) with a retriable exit code in this attempt; "
                f"up to {cap} are retried in place"
            )
            self.recorder.event(raw, WARNING, Reason.RETRIABLE_FAILURE, message)
        for cp in checkpoint_events(stored.checkpoint, final.checkpoint):
            self.recorder.event(raw, WARNING if cp.warning else NORMAL, cp.reason, cp.message)
        log.info("status", key=update.job.key, phase=final.phase.value, restarts=final.restarts)
        return True

    def deprecated_field(self, raw: Obj, job: TorchrunJob) -> None:
        source = job.spec.workspace.source.value
        message = (
            "spec.volumes.workspace is the seed's deprecated spelling of spec.workspace; it is read as "
            f"workspace: {{source: {source}}}: write that instead (both at once are refused)"
        )
        self.recorder.event(raw, WARNING, Reason.DEPRECATED_FIELD, message)
