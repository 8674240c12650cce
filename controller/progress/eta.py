"""The training rate and its estimated end, from the recent steps only.

`StepHistory` keeps at most `MAX_SAMPLES` (time, step) samples, each a step the job reached and
when; `rate(window)` is the steps per second between the oldest sample within `window` seconds of
the newest and the newest one — the recent rate, so a slow start or an earlier phase at another
speed does not skew the estimate for long. The rate never mixes two runs: the history starts
again when the step goes back (a restart resumed from an earlier checkpoint) and when the job's
restart count (`status.restarts`, told by `restarted`) changes — a restart in place keeps the
pods and the worker Job, and the first step seen after it need not be below the last one seen
before (reports are sampled), while the time between counts as training. `eta` is the moment
`total_steps` will be reached at that rate; None when it cannot be told (fewer than two samples,
no total, no progress in the window). `while_running` keeps an ETA only for a running job: a
failed, succeeded, suspended or pending job has no end in sight, and its last estimate would
only count down to `ETA 0s`. Pure: times are seconds given by the caller.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from datetime import datetime, timedelta

from controller.api.progress import Progress

MAX_SAMPLES = 64
DEFAULT_WINDOW = 600.0  # seconds


class StepHistory:
    def __init__(self, max_samples: int = MAX_SAMPLES, restarts: int | None = None) -> None:
        self._samples: deque[tuple[float, int]] = deque(maxlen=max_samples)
        self._restarts = restarts  # the restart count the samples are taken under, once told

    def restarted(self, restarts: int) -> None:
        """The job's restart count is `restarts` now: another count than the samples' starts the
        history again (module doc); the first count told starts nothing."""
        if self._restarts is not None and restarts != self._restarts:
            self._samples.clear()
        self._restarts = restarts

    def add(self, at: float, step: int) -> None:
        """Step `step` was reached at `at` (seconds); a repeated step keeps its first time."""
        if self._samples:
            last_at, last_step = self._samples[-1]
            if step == last_step:
                return
            if step < last_step or at < last_at:
                self._samples.clear()
        self._samples.append((at, step))

    def rate(self, window: float = DEFAULT_WINDOW) -> float | None:
        """Steps per second over the last `window` seconds of samples, or None."""
        if len(self._samples) < 2:
            return None
        newest_at, newest_step = self._samples[-1]
        oldest_at, oldest_step = next((t, s) for t, s in self._samples if t >= newest_at - window)
        if newest_at <= oldest_at:
            # one sample in the window: the rate since the one before it
            oldest_at, oldest_step = self._samples[-2]
            if newest_at <= oldest_at:
                return None
        return (newest_step - oldest_step) / (newest_at - oldest_at)


def eta(step: int | None, total_steps: int | None, rate: float | None, at: datetime) -> datetime | None:
    """When `total_steps` is reached going on from `step` (reached at `at`) at `rate` steps/s."""
    if step is None or total_steps is None:
        return None
    if step >= total_steps:
        return at
    if not rate or rate <= 0:
        return None
    seconds = (total_steps - step) / rate
    if seconds > 10 * 365 * 86400:  # beyond ten years: no estimate worth printing
        return None
    return at + timedelta(seconds=seconds)


def while_running(progress: Progress | None, running: bool) -> Progress | None:
    """`progress` as the status shows it: its ETA only while the job is running (module doc)."""
    if progress is None or progress.eta is None or running:
        return progress
    return dataclasses.replace(progress, eta=None)


def percent(step: int | None, total_steps: int | None) -> int | None:
    """Whole percent done (0..100), floored so 100 means finished."""
    if step is None or not total_steps:
        return None
    return min(100, step * 100 // total_steps)
