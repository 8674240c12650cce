"""Which checkpoints exist under a job's root and which are complete (docs/checkpoints.md).

`scan(root)` lists the entries directly under `root` — it never descends, never follows a
symbolic link and never reads outside `root`:
- an entry is a real directory (not a symlink, whatever it points at) whose name does not start
  with `.` (temporary directories of writers, our own markers); files and links are ignored;
- it is **complete** when it holds, as a regular file (a symlink does not count):
  `.metadata` (a `torch.distributed.checkpoint` directory: DCP writes it last), or
  `trainer_state.json` with the name `checkpoint-<step>` (the Hugging Face Trainer writes it after
  the weights), or our marker `.torchrun_complete` (`torchrun_checkpoint.mark_complete`);
- its step comes from its name (`step_of`): `step-1200`, `step_1200`, `step1200`,
  `checkpoint-1200` (Hugging Face), `global_step1200` (DeepSpeed), `epoch=3-step=1200`
  (Lightning), `run-a-step-1200` — the word `step`, `checkpoint` or `global_step` at the start of
  the name or after `-`/`_`, optionally followed by `-`, `_` or `=`, then the digits ending the
  name; anything else has none. Its time is the mtime of the file that made it complete (else of
  the directory).
An incomplete entry is **started by us** (`Entry.ours`) when its name is exactly `step-<step>` and
it holds our `.torchrun_started` as a regular file (`torchrun_checkpoint.path_for` writes it when
it hands the directory out): the only incomplete entries retention may remove.
A root that does not exist or is not a directory has no entries. Entries vanishing while they are
scanned are simply missing from the result.

Standard library only and importing nothing else: `prepare` copies this very module to every
worker's `/opt/torchrun/python/torchrun_checkpoint_discovery.py`, where `torchrun_checkpoint`
uses it after torchrun restarted the workers in place (one home for the rules).

`latest(entries)` is the newest complete entry: by step when every complete entry has one, else
by time (a name without a step cannot be compared with one that has one); ties by time, then name.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

MARKER = ".torchrun_complete"  # what torchrun_checkpoint.mark_complete writes
STARTED = ".torchrun_started"  # what torchrun_checkpoint.path_for writes
DCP_METADATA = ".metadata"
HF_STATE = "trainer_state.json"

DCP = "dcp"
HF = "hf"
MARKED = "marker"

_STEP = re.compile(r"(?:^|[-_])(?:global_step|step|checkpoint)[-_=]?([0-9]{1,18})\Z")
_HF = re.compile(r"^checkpoint-[0-9]{1,18}\Z")


def step_of(name: str) -> int | None:
    """The step in a checkpoint's name, or None (module doc)."""
    match = _STEP.search(name)
    return int(match.group(1)) if match else None


def is_hf_name(name: str) -> bool:
    """A Hugging Face Trainer checkpoint's name: `checkpoint-<step>`."""
    return _HF.match(name) is not None


@dataclass(frozen=True)
class Entry:
    """One directory directly under the root."""

    name: str
    path: Path
    complete: bool
    kind: str | None  # DCP, HF, MARKED; None when incomplete
    step: int | None
    time: float  # seconds since the epoch
    ours: bool = False  # incomplete, and started by torchrun_checkpoint.path_for (module doc)


def _regular_mtime(directory: str, name: str) -> float | None:
    """The mtime of `directory/name` when it is a regular file (links not followed), else None."""
    try:
        st = os.lstat(os.path.join(directory, name))
    except OSError:
        return None
    return st.st_mtime if stat.S_ISREG(st.st_mode) else None


def entry_at(root: Path, name: str) -> Entry | None:
    """What `root/name` is now (module doc), or None when it is not an entry (or is gone)."""
    path = os.path.join(root, name)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if name.startswith(".") or not stat.S_ISDIR(st.st_mode):
        return None
    found = [(MARKED, _regular_mtime(path, MARKER)), (DCP, _regular_mtime(path, DCP_METADATA))]
    if is_hf_name(name):
        found.append((HF, _regular_mtime(path, HF_STATE)))
    step = step_of(name)
    for kind, mtime in found:
        if mtime is not None:
            return Entry(name, Path(path), True, kind, step, mtime)
    ours = name == f"step-{step}" and _regular_mtime(path, STARTED) is not None
    return Entry(name, Path(path), False, None, step, st.st_mtime, ours)


def scan(root: Path) -> list[Entry]:
    """The entries directly under `root` (module doc), in no particular order."""
    try:
        with os.scandir(root) as items:
            names = [item.name for item in items]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [e for name in names if (e := entry_at(root, name)) is not None]


def by_age(entries: Iterable[Entry]) -> list[Entry]:
    """The complete entries, newest first (module doc)."""
    complete = [e for e in entries if e.complete]
    if all(e.step is not None for e in complete):
        return sorted(complete, key=lambda e: (e.step or 0, e.time, e.name), reverse=True)
    return sorted(complete, key=lambda e: (e.time, e.name), reverse=True)


def latest(entries: Sequence[Entry]) -> Entry | None:
    """The newest complete entry, or None when there is none."""
    ordered = by_age(entries)
    return ordered[0] if ordered else None


def still_complete(entry: Entry) -> bool:
    """Whether `entry` is still there and complete (it may vanish between a scan and a start)."""
    again = entry_at(entry.path.parent, entry.name)
    return again is not None and again.complete
