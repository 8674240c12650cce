"""`status.goodput`: how much of a job's wall time advanced training for good, the rest by cause.

The controller folds what each status write already says into this ledger
(`controller/torchrunjob/goodput.py`): seconds by cause, and what it needs to go on — where its
clock stands (`mark`, seconds since `since`), what the job was doing since then (`state`), the
step and the highest step reached, the resumed checkpoint's step and the time a step takes —
so a new leader continues from the status, not from memory. Bounded: a fixed set of numbers.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from controller.api.fields import api

_STEP = {"format": "int64"}


@dataclass(frozen=True)
class GoodputSeconds:
    """Seconds of wall time by what they went to."""

    good: float = field(default=0.0, metadata=api("Training that advanced past the highest step before."))
    scheduling: float = field(default=0.0, metadata=api("Waiting for the first attempt's workers to run."))
    startup: float = field(default=0.0, metadata=api("Workers running before the first training step."))
    restarts: float = field(
        default=0.0, metadata=api("From an attempt's last step to the next attempt's first step.")
    )
    redone: float = field(default=0.0, metadata=api("Steps done again after a restart."))
    stalls: float = field(default=0.0, metadata=api("Training time in which no step advanced."))


@dataclass(frozen=True)
class Goodput:
    """The fraction of wall time since the job was admitted that advanced training for good."""

    percent: int = field(
        default=0,
        metadata=api("seconds.good over all seconds counted, in whole percent.", schema={"format": "int32"}),
    )
    summary: str | None = field(
        default=None,
        metadata=api(
            "percent with a % sign once a training step was seen (the GOODPUT column); absent before, "
            "and for a job whose program never reports, whose time after startup is unknown.",
            schema={"maxLength": 8},
        ),
    )
    seconds: GoodputSeconds = field(default_factory=GoodputSeconds, metadata=api("Seconds by cause."))
    since: datetime.datetime | None = field(default=None, metadata=api("Where the ledger's clock starts."))
    mark: float = field(default=0.0, metadata=api("Seconds after since counted so far."))
    state: str = field(
        default="Scheduling",
        metadata=api(
            "What the job has been doing since mark: Scheduling, Startup, Restarting, Training, Done."
        ),
    )
    restarts: int = field(
        default=0, metadata=api("status.restarts when last counted.", schema={"format": "int32"})
    )
    step: int | None = field(default=None, metadata=api("The attempt's step at mark.", schema=_STEP))
    high_step: int | None = field(default=None, metadata=api("The highest step reached.", schema=_STEP))
    saved_step: int | None = field(
        default=None, metadata=api("The newest complete checkpoint's step.", schema=_STEP)
    )
    resume_step: int | None = field(
        default=None, metadata=api("The step the current attempt resumed from.", schema=_STEP)
    )
    step_seconds: float | None = field(
        default=None, metadata=api("Seconds one step takes: the median of recentStepSeconds.")
    )
    recent_step_seconds: tuple[float, ...] = field(
        default=(),
        metadata=api("Seconds per step between the last few pairs of step reports.", schema={"maxItems": 5}),
    )
    first_step: int | None = field(
        default=None,
        metadata=api("The attempt's first step seen, while the step time is unknown.", schema=_STEP),
    )
    first_mark: float | None = field(
        default=None, metadata=api("When first_step was reached (seconds after since).")
    )
