"""Checkpoints in the API (docs/checkpoints.md): `status.checkpoint` of a job.

What rank 0's `prepare` init container found when the current attempt's workers started (the
sync program's report, `controller.checkpoint.report`): the newest complete checkpoint, how many
complete ones there are, and what this attempt resumed from — the start. What the training has
saved since is `newest`: rank 0's progress reporter scans the checkpoints root while the attempt
runs and tells the newest complete one with its reports (`controller.progress.saved`).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from controller.api.fields import api

_PATH = {"maxLength": 4096}


@dataclass(frozen=True)
class NewestCheckpoint:
    """The newest complete checkpoint while the attempt runs."""

    name: str = field(metadata=api("Its entry under the checkpoints root.", schema={"maxLength": 255}))
    step: int | None = field(
        default=None, metadata=api("Its step, read from its name.", schema={"format": "int64"})
    )
    time: datetime.datetime | None = field(default=None, metadata=api("When it was saved."))


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
    newest: NewestCheckpoint | None = field(
        default=None,
        metadata=api(
            "The newest complete checkpoint now, while the attempt runs: what node rank 0's progress "
            "reporter last found (it scans the checkpoints root at most every 30 s and tells it with "
            "its progress reports); absent until a report carries one."
        ),
    )
    problems: tuple[str, ...] = field(
        default=(),
        metadata=api(
            "What went wrong at this start (a chosen checkpoint that vanished, a removal that failed).",
            schema={"maxItems": 16, "items": {"type": "string", "maxLength": 512}},
        ),
    )
