"""What `kubectl torchrun checkpoints NAME` shows: every entry of a job's root with its step, time,
size and completeness (docs/checkpoints.md).

`listing(root)` scans like `discovery.scan` (directly under the root, never following a link but
Lightning's `last.ckpt`) and adds each entry's size: a file's own, or the bytes of the regular
files below a directory, counted without following links.
Entries come newest first: the complete ones in `discovery.by_age` order, then the incomplete ones
by step, else time. `to_json`/`from_json` carry it from the pod that reads the volume to the plugin;
`from_json` never raises (anything unreadable is an empty list).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from controller.checkpoint.discovery import Entry, by_age, scan


@dataclass(frozen=True)
class Listed:
    name: str
    step: int | None
    time: float
    complete: bool
    kind: str | None
    bytes: int


def _size(path: Path, file: bool) -> int:
    if file:  # a checkpoint file, or Lightning's link to one beside it (discovery checked that)
        try:
            return os.stat(path).st_size
        except OSError:
            return 0
    total = 0
    for directory, _, files in os.walk(path):  # os.walk does not descend into linked directories
        for name in files:
            try:
                st = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def _incomplete_order(e: Entry) -> tuple[int, float, str]:
    return (e.step if e.step is not None else -1, e.time, e.name)


def listing(root: Path) -> list[Listed]:
    """The entries of `root`, newest first (module doc)."""
    entries = scan(root)
    incomplete = sorted((e for e in entries if not e.complete), key=_incomplete_order, reverse=True)
    return [
        Listed(e.name, e.step, e.time, e.complete, e.kind, _size(e.path, e.file))
        for e in by_age(entries) + incomplete
    ]


def to_json(items: list[Listed]) -> str:
    return json.dumps([asdict(i) for i in items], separators=(",", ":"))


def from_json(text: str) -> list[Listed]:
    try:
        data: Any = json.loads(text)
        return [
            Listed(
                str(d["name"]),
                d.get("step"),
                float(d["time"]),
                bool(d["complete"]),
                d.get("kind"),
                int(d["bytes"]),
            )
            for d in data
        ]
    except (ValueError, TypeError, KeyError):
        return []
