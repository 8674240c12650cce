"""Checkpoints in the API (docs/checkpoints.md): `status.checkpoint` of a job.

What rank 0's `prepare` init container found when the current attempt's workers started (the
sync program's report, `controller.checkpoint.report`): the newest complete checkpoint, how many
complete ones there are, and what this attempt resumed from. It describes the start, not the
training since: a checkpoint written while the job runs shows up at the next start.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from controller.api.fields import api

_PATH = {"maxLength": 4096}


@dataclass(frozen=True)
class CheckpointStatus:
    """The checkpoints of the job's current attempt, as its workers' start found them."""

    attempt: int = field(
        default=0,
        metadata=api(
            "The whole-job restart (status.restarts) these workers belong to.", schema={"format": "int32"}
        ),
    )
    latest: str | None = field(
        default=None,
        metadata=api("The newest complete checkpoint (its path in the pods).", schema=_PATH),
    )
    step: int | None = field(
        default=None, metadata=api("Its step, read from its name.", schema={"format": "int64"})
    )
    time: datetime.datetime | None = field(default=None, metadata=api("When it was completed."))
    count: int = field(default=0, metadata=api("Complete checkpoints kept.", schema={"format": "int32"}))
    resumed_from: str | None = field(
        default=None,
        metadata=api(
            "What this attempt resumed from (TORCHRUN_RESUME_FROM); absent when it started from scratch.",
            schema=_PATH,
        ),
    )
    pruned: int = field(
        default=0,
        metadata=api("Checkpoints retention removed at this start.", schema={"format": "int32"}),
    )
    downloaded: str | None = field(
        default=None,
        metadata=api(
            "The copy this start restored from the S3 mirror (its name).", schema={"maxLength": 255}
        ),
    )
    mirrored: int = field(
        default=0,
        metadata=api("Checkpoints uploaded to the S3 mirror at this start.", schema={"format": "int32"}),
    )
    problems: tuple[str, ...] = field(
        default=(),
        metadata=api(
            "What went wrong at this start (a chosen checkpoint that vanished, a removal that failed).",
            schema={"maxItems": 16, "items": {"type": "string", "maxLength": 512}},
        ),
    )
