"""Checking a filled tree on disk: what every source's generation must satisfy before publish.

`check_tree(root, limits)` walks `root` without following symlinks and refuses (`InvalidArchive`)
a symlink whose real resolution leaves `root` (absolute targets, `..` chains, targets through
other symlinks), a device, fifo or socket, and the reserved top-level `.sync_success`; it counts
entries and bytes against `limits` (`ArchiveTooLarge`) and returns them. Memory is bounded by the
tree's breadth, not its size.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from controller.sync.errors import INVALID_ARCHIVE, SyncError
from controller.sync.limits import Limits, Stats, Tally
from controller.sync.names import RESERVED_TOP_LEVEL


def check_tree(root: Path, limits: Limits | None = None) -> Stats:
    """Check `root` as described in the module docstring; return its entries and bytes."""
    real_root = os.path.realpath(root)
    tally = Tally(limits or Limits())
    for name in os.listdir(root):
        if name in RESERVED_TOP_LEVEL:
            raise SyncError(INVALID_ARCHIVE, f"reserved name {name!r}")
    _walk(str(root), real_root, str(root), tally)
    return tally.stats()


def _walk(top: str, real_root: str, root: str, tally: Tally) -> None:
    """Visit every entry under `top`; iterative, so depth is bounded by PATH_MAX, not the stack."""
    pending = [top]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                rel = os.path.relpath(entry.path, root)
                if stat.S_ISDIR(st.st_mode):
                    tally.add()
                    pending.append(entry.path)
                elif stat.S_ISREG(st.st_mode):
                    tally.add(st.st_size)
                elif stat.S_ISLNK(st.st_mode):
                    check_symlink_inside(entry.path, real_root, rel)
                    tally.add()
                else:
                    raise SyncError(INVALID_ARCHIVE, f"{rel!r} is a {_kind(st.st_mode)}")


def check_symlink_inside(path: str, real_root: str, rel: str) -> None:
    """Refuse the symlink at `path` when its real resolution is not `real_root` or below it."""
    target = os.readlink(path)
    if os.path.isabs(target):
        raise SyncError(INVALID_ARCHIVE, f"symlink {rel!r} has an absolute target {target!r}")
    resolved = os.path.realpath(path)
    if resolved != real_root and not resolved.startswith(real_root + os.sep):
        raise SyncError(INVALID_ARCHIVE, f"symlink {rel!r} -> {target!r} leaves the tree")


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"
