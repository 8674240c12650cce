"""Retention: which checkpoints go when only the newest `keep` may stay (docs/checkpoints.md).

Retention removes only what it can prove is an old save, never a user's directory:
- `newest_beyond(entries, keep, protected)` (pure): the complete entries **with a step** — the
  directories and the checkpoint files discovery counts (`ckpt_500.pt`, `epoch=0-step=10.ckpt`) —
  ordered by step (then time, then name), after the `keep` newest, less those named in
  `protected` (what a framework's own state names as kept: `kept_by_frameworks`). A complete entry
  without a step (a `pretrained/` DCP directory, `best/`, Lightning's `last.ckpt`, nanoGPT's
  `ckpt.pt`) is never chosen and never counts towards `keep`; nor is a DeepSpeed or Megatron
  directory (`FRAMEWORK_OWNED`: their loaders go by the root's `latest` /
  `latest_checkpointed_iteration.txt`, and nothing proves a tag is not one the user means to keep).
  The S3 mirror applies the same rule to its copies.
- `prune_plan(entries, keep, protected)` (pure) adds the incomplete entries **we started**
  (`Entry.ours`: `step-N` handed out by `torchrun_checkpoint.path_for`) whose step is below the
  newest complete one's (abandoned saves). Any other incomplete entry below it (a DeepSpeed
  `global_stepN/`, a directory the user made) is never chosen: the plan names it in `kept`, one
  line each, for `status.checkpoint.problems`. Nothing newer than the newest complete entry (a
  save in progress) and nothing without a step is chosen or reported.
- `kept_by_frameworks(entries)` reads what the frameworks say they keep: the Hugging Face
  Trainer's `best_model_checkpoint` in the newest `checkpoint-N/trainer_state.json` (read up to
  `STATE_LIMIT` bytes), and Lightning's `best_model_path` in the newest Lightning checkpoint (its
  ModelCheckpoint state, in the pickle of the `.ckpt` file or of a sharded directory's `meta.pt`,
  read without running it: `discovery.pickle_values`). Each names a basename kept; a state it
  cannot read protects every checkpoint of that framework and is a problem line. Lightning's
  `last.ckpt` has no step, so it is never removed anyway.

`prune(plan)` removes what the plan chose, each only if it is still what it was — a real
directory, or for a file entry a regular file, directly under its root (checked again just
before, without following links) — and never follows a link inside a directory (`shutil.rmtree`
unlinks links); it returns the names removed and one line per failure.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from controller.checkpoint.discovery import (
    DEEPSPEED,
    HF,
    HF_STATE,
    LIGHTNING,
    LIGHTNING_META,
    MEGATRON,
    Entry,
    pickle_values,
)

FRAMEWORK_OWNED = frozenset({DEEPSPEED, MEGATRON})  # kinds retention never removes (module doc)
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
    """The complete, stepped entries after the `keep` newest, less `protected` and what a framework
    owns (module doc)."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    ours = [e for e in _by_step(entries) if e.kind not in FRAMEWORK_OWNED]
    return [e for e in ours[keep:] if e.name not in protected]


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
        f"kept {e.name}: incomplete{f' ({e.note})' if e.note else ''}, and not a save "
        "torchrun_checkpoint.path_for started; remove it yourself if it is abandoned"
        for e in below
        if not e.ours
    ]
    return Plan(old + [e for e in below if e.ours], kept)


def _name(entry: Entry) -> str:
    return entry.name


def kept_by_frameworks(entries: Sequence[Entry]) -> tuple[frozenset[str], list[str]]:
    """The names a framework's own state keeps, and a problem line per state unreadable (module
    doc). Reads one file per framework at most."""
    hf, hf_problems = _kept_by_trainer(entries)
    lightning, lightning_problems = _kept_by_lightning(entries)
    return hf | lightning, hf_problems + lightning_problems


def _newest(entries: list[Entry]) -> Entry:
    return max(entries, key=lambda e: (e.step or 0, e.time, e.name))


def _kept_by_trainer(entries: Sequence[Entry]) -> tuple[frozenset[str], list[str]]:
    trainer = [e for e in entries if e.complete and e.kind == HF]
    if not trainer:
        return frozenset(), []
    path = os.path.join(_newest(trainer).path, HF_STATE)
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


def _kept_by_lightning(entries: Sequence[Entry]) -> tuple[frozenset[str], list[str]]:
    """Lightning's `best_model_path` in its newest checkpoint (a link such as `last.ckpt` is read
    through the file it names, inside the root: discovery checked that)."""
    lightning = [e for e in entries if e.complete and e.kind == LIGHTNING and not e.path.is_symlink()]
    if not lightning:
        return frozenset(), []
    newest = _newest(lightning)
    path = str(newest.path) if newest.file else os.path.join(newest.path, LIGHTNING_META)
    values = pickle_values(path, ("best_model_path",))
    if values is None:
        names = frozenset(e.name for e in entries if e.kind == LIGHTNING)
        return names, [f"kept every Lightning checkpoint: {path} could not be read for its best checkpoint"]
    best = values.get("best_model_path")
    if not isinstance(best, str) or not best:
        return frozenset(), []
    return frozenset({os.path.basename(best.rstrip("/"))}), []


def prune(plan: Sequence[Entry]) -> Pruned:
    """Remove the planned entries (module doc)."""
    out = Pruned()
    for entry in plan:
        try:
            st = os.lstat(entry.path)
            if entry.path.name != entry.name or not (stat.S_ISREG if entry.file else stat.S_ISDIR)(
                st.st_mode
            ):
                continue  # replaced by something else since the scan: not ours to judge
            if entry.file:
                os.unlink(entry.path)
            else:
                shutil.rmtree(entry.path)
        except FileNotFoundError:
            continue
        except OSError as e:
            out.failed.append(f"{entry.name}: {e.strerror or e}")
            continue
        out.removed.append(entry.name)
    return out
