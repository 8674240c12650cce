"""Retention: which checkpoints go when only the newest `keep` may stay (docs/checkpoints.md).

Retention removes only what it can prove is an old save, never a user's directory:
- `newest_beyond(entries, keep, protected)` (pure): the complete entries **with a step**, ordered
  by step (then time, then name), after the `keep` newest — less those named in `protected` (what
  a framework's own state names as kept: `kept_by_frameworks`). A complete entry without a step
  (a `pretrained/` DCP directory, a `best/` directory) is never chosen and never counts towards
  `keep`. The S3 mirror applies the same rule to its copies.
- `prune_plan(entries, keep, protected)` (pure) adds the incomplete entries **we started**
  (`Entry.ours`: `step-N` handed out by `torchrun_checkpoint.path_for`) whose step is below the
  newest complete one's (abandoned saves). Any other incomplete entry below it (a DeepSpeed
  `global_stepN/`, a directory the user made) is never chosen: the plan names it in `kept`, one
  line each, for `status.checkpoint.problems`. Nothing newer than the newest complete entry (a
  save in progress) and nothing without a step is chosen or reported.
- `kept_by_frameworks(entries)` reads what the frameworks say they keep: the Hugging Face
  Trainer's `best_model_checkpoint` in the newest `checkpoint-N/trainer_state.json` (read up to
  `STATE_LIMIT` bytes; a state it cannot read protects every Trainer checkpoint and is a problem
  line). Lightning's best and last paths are files (`*.ckpt`), which discovery ignores, so
  retention never removes them.

`prune(plan)` removes what the plan chose, each only if it is still a real directory directly
under its root (checked again just before, without following links), and never follows a link
inside it (`shutil.rmtree` unlinks links); it returns the names removed and one line per failure.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from controller.checkpoint.discovery import HF, HF_STATE, Entry

STATE_LIMIT = 16 * 1024 * 1024  # bytes of a trainer_state.json read for its best checkpoint


@dataclass(frozen=True)
class Plan:
    """What retention removes, and the entries it may not prove are ours (one line each)."""

    remove: list[Entry] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Pruned:
    """What `prune` did."""

    removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _by_step(entries: Sequence[Entry]) -> list[Entry]:
    """The complete entries with a step, newest first."""
    stepped = [e for e in entries if e.complete and e.step is not None]
    return sorted(stepped, key=lambda e: (e.step or 0, e.time, e.name), reverse=True)


def newest_beyond(entries: Sequence[Entry], keep: int, protected: Collection[str] = ()) -> list[Entry]:
    """The complete, stepped entries after the `keep` newest, less `protected` (module doc)."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    return [e for e in _by_step(entries)[keep:] if e.name not in protected]


def prune_plan(entries: Sequence[Entry], keep: int, protected: Collection[str] = ()) -> Plan:
    """What goes so that only the `keep` newest complete checkpoints stay (module doc)."""
    old = newest_beyond(entries, keep, protected)
    stepped = _by_step(entries)
    if not stepped:
        return Plan(old)
    newest = stepped[0].step or 0
    below = sorted(
        (e for e in entries if not e.complete and e.step is not None and e.step < newest), key=_name
    )
    kept = [
        f"kept {e.name}: incomplete, and not a save torchrun_checkpoint.path_for started; "
        "remove it yourself if it is abandoned"
        for e in below
        if not e.ours
    ]
    return Plan(old + [e for e in below if e.ours], kept)


def _name(entry: Entry) -> str:
    return entry.name


def kept_by_frameworks(entries: Sequence[Entry]) -> tuple[frozenset[str], list[str]]:
    """The names a framework's own state keeps, and a problem line per state unreadable (module
    doc). Reads one file at most."""
    trainer = [e for e in entries if e.complete and e.kind == HF]
    if not trainer:
        return frozenset(), []
    newest = max(trainer, key=lambda e: (e.step or 0, e.time, e.name))
    path = os.path.join(newest.path, HF_STATE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as state:
            raw = state.read(STATE_LIMIT + 1)
        if len(raw) > STATE_LIMIT:
            raise ValueError(f"larger than {STATE_LIMIT} bytes")
        best = json.loads(raw).get("best_model_checkpoint")
    except (OSError, ValueError, AttributeError) as e:
        names = frozenset(t.name for t in trainer)
        return names, [f"kept every checkpoint-N: {path} could not be read for its best checkpoint ({e})"]
    if not isinstance(best, str) or not best:
        return frozenset(), []
    return frozenset({os.path.basename(best.rstrip("/"))}), []


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
