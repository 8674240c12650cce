"""One start's checkpoint work, run by every worker's `prepare` container (docs/checkpoints.md).

`resume(root, attempt=..., keep=..., prunes=...)` scans `root`; when `prunes` (rank 0) and `keep`
is set, removes what retention chooses (never what a framework's state keeps: `Resume.protected`,
which the S3 mirror's retention honours too; what it may not remove is said in `problems`); then
chooses the newest complete checkpoint and checks it is still there and complete just before
answering — one that vanished since the scan is reported
in `problems` and the next newest is chosen (scanning again), never crashed on. It answers the
environment the ranks get (`TORCHRUN_RESUME_FROM` when there is a checkpoint, nothing otherwise)
and the report rank 0 writes as its termination message.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from controller.checkpoint.discovery import Entry, by_age, scan, still_complete
from controller.checkpoint.report import CheckpointReport
from controller.checkpoint.retention import kept_by_frameworks, prune, prune_plan

ENV_RESUME = "TORCHRUN_RESUME_FROM"
ATTEMPTS = 5  # scans before giving up on a root whose newest checkpoints keep vanishing


@dataclass(frozen=True)
class Resume:
    env: dict[str, str]
    report: CheckpointReport
    protected: frozenset[str] = frozenset()  # names a framework's own state keeps (retention.py)


def rfc3339(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _choose(root: Path, problems: list[str]) -> tuple[Entry | None, list[Entry]]:
    for _ in range(ATTEMPTS):
        ordered = by_age(scan(root))
        for entry in ordered:
            if still_complete(entry):
                return entry, ordered
            problems.append(f"{entry.path} vanished or became incomplete before the start; not chosen")
        if not ordered:
            return None, ordered
    return None, []


def resume(root: Path, *, attempt: int, keep: int | None, prunes: bool) -> Resume:
    """The environment and report of one start (module doc)."""
    problems: list[str] = []
    pruned = 0
    protected: frozenset[str] = frozenset()
    if prunes and keep is not None:
        entries = scan(root)
        protected, unread = kept_by_frameworks(entries)
        plan = prune_plan(entries, keep, protected)
        done = prune(plan.remove)
        pruned = len(done.removed)
        problems += unread + plan.kept + [f"could not remove {line}" for line in done.failed]
    chosen, ordered = _choose(root, problems)
    report = CheckpointReport(
        root=str(root),
        attempt=attempt,
        latest=str(chosen.path) if chosen else None,
        step=chosen.step if chosen else None,
        time=rfc3339(chosen.time) if chosen else None,
        count=len(ordered),
        resumed_from=str(chosen.path) if chosen else None,
        pruned=pruned,
        problems=tuple(problems),
    )
    return Resume({ENV_RESUME: str(chosen.path)} if chosen else {}, report, protected)
