"""Retention: which checkpoints go when only the newest `keep` may stay (docs/checkpoints.md).

`prune_plan(entries, keep)` (pure) chooses, from one `discovery.scan`:
- the complete entries after the `keep` newest (`discovery.by_age`);
- the incomplete entries whose step is below the newest complete one's (abandoned saves): an
  incomplete entry without a step, or newer than the newest complete one (a save in progress),
  is never chosen — it may be the user's own directory or a checkpoint being written.
The newest complete entry is never chosen (`keep` is at least 1).

`prune(plan)` removes what the plan chose, each only if it is still a real directory directly
under its root (checked again just before, without following links), and never follows a link
inside it (`shutil.rmtree` unlinks links); it returns the names removed and one line per failure.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from controller.checkpoint.discovery import Entry, by_age


@dataclass(frozen=True)
class Pruned:
    """What `prune` did."""

    removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def prune_plan(entries: Sequence[Entry], keep: int) -> list[Entry]:
    """The entries to remove so that only the `keep` newest complete ones stay (module doc)."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    ordered = by_age(entries)
    if not ordered:
        return []
    newest = ordered[0].step
    stale = [
        e for e in entries if not e.complete and e.step is not None and newest is not None and e.step < newest
    ]
    return ordered[keep:] + sorted(stale, key=lambda e: e.name)


def prune(plan: Sequence[Entry]) -> Pruned:
    """Remove the planned entries (module doc)."""
    out = Pruned()
    for entry in plan:
        try:
            st = os.lstat(entry.path)
            if not stat.S_ISDIR(st.st_mode) or entry.path.name != entry.name:
                continue  # replaced by something else since the scan: not ours to judge
            shutil.rmtree(entry.path)
        except FileNotFoundError:
            continue
        except OSError as e:
            out.failed.append(f"{entry.name}: {e.strerror or e}")
            continue
        out.removed.append(entry.name)
    return out
