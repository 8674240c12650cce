"""`status.progress` from the reports of a job (pure): the lead rank's record, its percent, its
ETA at the recent rate, and the PROGRESS column's text.

Times are whole seconds, as the API stores them, so a progress built again from the same reports
equals the one read back from the API server — the reconciler writes only when it differs.
"""

from __future__ import annotations

from datetime import datetime

from controller.api.progress import Progress
from controller.progress.eta import eta, percent
from controller.progress.store import JobView, lead_rank


def progress_of(view: JobView) -> Progress | None:
    """The progress the status shows for `view` (None when no rank reported)."""
    rank = lead_rank(view.ranks)
    if rank is None:
        return None
    report = view.ranks[rank]
    r = report.record
    done = percent(r.step, r.total_steps)
    return Progress(
        step=r.step,
        total_steps=r.total_steps,
        epoch=r.epoch,
        percent=done,
        samples_per_second=r.samples_per_second,
        eta=_seconds(eta(r.step, r.total_steps, view.rate, report.changed_at)),
        metrics=dict(r.metrics),
        update_time=_seconds(report.changed_at),
        summary=summary(done, r.step),
        rank=rank,
    )


def summary(done: int | None, step: int | None) -> str | None:
    """`42%`, else `step 1200`, else nothing."""
    if done is not None:
        return f"{done}%"
    return None if step is None else f"step {step}"


def _seconds(at: datetime | None) -> datetime | None:
    return None if at is None else at.replace(microsecond=0)
