"""The newest complete checkpoint while a job runs: what rank 0's reporter sidecar saw, bounded.

The sidecar of node rank 0, when the queue gives jobs a checkpoints volume (mounted read-only in
the sidecar, `TORCHRUN_CHECKPOINT_DIR`), scans its root at most once per `SCAN_SECONDS`
(`newest_saved`: `checkpoint.discovery`, names and markers only — a few bytes per entry) and
sends the newest complete entry with its progress reports as `{"name", "step", "ageSeconds"}`.
An age and not a time, so the controller's clock is the only one that matters: the controller
dates the save at `received - ageSeconds`. The controller parses what it is sent with
`parse_saved` (a pod is not trusted): a name of at most `MAX_NAME` characters from `NAME`
(an entry of the root, never a path), a step in 0..`MAX_STEP`, a finite age ≥ 0 — anything else
is no checkpoint at all. Pure but for `newest_saved`'s reads of the volume.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.checkpoint import discovery

SCAN_SECONDS = 30.0
MAX_NAME = 255
MAX_STEP = 2**53
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+@,:-]*")


@dataclass(frozen=True)
class Saved:
    """A complete checkpoint: its entry name, its step (None: its name has none) and its age in
    seconds when it was sent."""

    name: str
    step: int | None
    age: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "step": self.step, "ageSeconds": round(self.age, 3)}

    def same_save(self, other: Saved | None) -> bool:
        """`other` is the same entry (ages differ with every scan; the save does not)."""
        return other is not None and (other.name, other.step) == (self.name, self.step)


def parse_saved(value: Any) -> Saved | None:
    """The checkpoint a report carries, or None when it carries none or nonsense (module doc)."""
    if not isinstance(value, Mapping):
        return None
    name, step, age = value.get("name"), value.get("step"), value.get("ageSeconds")
    if not isinstance(name, str) or len(name) > MAX_NAME or not NAME.fullmatch(name):
        return None
    if step is not None and (
        isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP
    ):
        return None
    if isinstance(age, bool) or not isinstance(age, (int, float)) or not math.isfinite(age) or age < 0:
        return None
    return Saved(name, step, float(age))


def newest_saved(root: str, now: float | None = None) -> Saved | None:
    """The newest complete checkpoint under `root` (None: none, or unreadable), its age measured
    against `now` (the wall clock: a file's mtime is wall-clock time)."""
    try:
        newest = discovery.latest(discovery.scan(Path(root)))
    except OSError:
        return None
    if newest is None or len(newest.name) > MAX_NAME or not NAME.fullmatch(newest.name):
        return None
    age = max(0.0, (time.time() if now is None else now) - newest.time)
    return Saved(newest.name, newest.step, age)
