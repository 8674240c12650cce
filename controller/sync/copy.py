"""The workers' init container: wait for a published generation, copy its tree out.

`wait_for_generation` polls until `CURRENT` names a generation ≥ the minimum whose marker exists
(a reader never trusts CURRENT alone), or raises `WorkspaceError` after the timeout.
`copy_tree` copies that generation into the target directory: directories, regular files with
their modes, symlinks as symlinks, never the marker; an entry already at the target (a restarted
init container) is replaced, so copying twice gives the same tree.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path

from controller.sync import layout
from controller.sync.errors import WORKSPACE_ERROR, SyncError
from controller.sync.generations import Marker, read_marker
from controller.sync.remove import remove_tree

POLL_INTERVAL = 0.5


def wait_for_generation(
    workspace: Path,
    min_generation: int,
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Marker:
    """The marker of the generation CURRENT names, once it is ≥ `min_generation` and marked."""
    deadline = clock() + timeout
    while True:
        current = layout.read_current(workspace)
        if current is not None and current >= min_generation:
            marker = read_marker(workspace, current)
            if marker is not None:
                return marker
        if clock() >= deadline:
            raise SyncError(
                WORKSPACE_ERROR, f"no generation >= {min_generation} published within {timeout:g} s"
            )
        sleep(POLL_INTERVAL)


def copy_tree(source: Path, target: Path) -> None:
    """Copy generation tree `source` into `target` (created if missing), without the marker."""
    target.mkdir(parents=True, exist_ok=True)
    pending = [(str(source), str(target))]  # iterative: depth is bounded by PATH_MAX, not the stack
    while pending:
        src, dst = pending.pop()
        with os.scandir(src) as entries:
            for entry in entries:
                if src == str(source) and entry.name == layout.MARKER:
                    continue
                to = os.path.join(dst, entry.name)
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    _make_dir(to, stat.S_IMODE(st.st_mode))
                    pending.append((entry.path, to))
                else:
                    _copy_entry(entry.path, to, st)


def _copy_entry(src: str, dst: str, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        _clear(dst)
        os.symlink(os.readlink(src), dst)
    elif stat.S_ISREG(st.st_mode):
        _clear(dst)
        shutil.copyfile(src, dst, follow_symlinks=False)
        os.chmod(dst, stat.S_IMODE(st.st_mode))


def _make_dir(path: str, mode: int) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, mode | 0o700)
        return
    _clear(path)
    os.mkdir(path, mode | 0o700)


def _clear(path: str) -> None:
    """Remove whatever is at `path` (a leftover from an earlier, interrupted copy)."""
    if os.path.isdir(path) and not os.path.islink(path):
        remove_tree(path)
    elif os.path.lexists(path):
        os.unlink(path)
