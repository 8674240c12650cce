"""The code of a hot reload in place: the newest published workspace generation, copied into the
pod's code directory by the supervisor before it starts the next torchrun (docs/design/recovery.md).

Standard library only (it runs in the training image). It reads the workspace PVC's layout as the
sync program writes it (controller/sync/layout.py; its test checks these names against it):
`CURRENT` names the newest generation, `generations/<G>/` holds its tree and
`generations/<G>/.sync_success` proves it complete — a reader never trusts `CURRENT` alone.

- `newest(workspace)`: the newest complete generation (its number and tree), or None.
- `replace_tree(source, target)`: `target` (the code directory, an emptyDir the training user
  owns) becomes exactly `source`'s tree — files, modes, symlinks as symlinks, never the marker —
  and whatever `source` lacks is removed; files whose size, mode and bytes already match are left
  as they are, so a one-line edit rewrites one file.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import stat
from pathlib import Path

CURRENT = "CURRENT"
GENERATIONS = "generations"
MARKER = ".sync_success"


def newest(workspace: str | os.PathLike[str]) -> tuple[int, Path] | None:
    """The newest complete generation of `workspace` and its tree, or None (none yet, unreadable)."""
    root = Path(workspace)
    try:
        text = (root / CURRENT).read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    tree = root / GENERATIONS / text
    return (int(text), tree) if (tree / MARKER).is_file() else None


def replace_tree(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> int:
    """Make `target` hold exactly `source`'s tree (module doc); the number of entries written."""
    written = 0
    pending = [(str(source), str(target), True)]
    while pending:
        src, dst, top = pending.pop()
        os.makedirs(dst, exist_ok=True)
        wanted = set()
        with os.scandir(src) as entries:
            for entry in entries:
                if top and entry.name == MARKER:
                    continue
                wanted.add(entry.name)
                to = os.path.join(dst, entry.name)
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    if os.path.lexists(to) and not (os.path.isdir(to) and not os.path.islink(to)):
                        _remove(to)
                    os.makedirs(to, exist_ok=True)
                    os.chmod(to, stat.S_IMODE(st.st_mode) | 0o700)
                    pending.append((entry.path, to, False))
                elif not _same(entry.path, to, st):
                    _remove(to)
                    if stat.S_ISLNK(st.st_mode):
                        os.symlink(os.readlink(entry.path), to)
                    elif stat.S_ISREG(st.st_mode):
                        shutil.copyfile(entry.path, to, follow_symlinks=False)
                        os.chmod(to, stat.S_IMODE(st.st_mode))
                    written += 1
        for name in os.listdir(dst):
            if name not in wanted:
                _remove(os.path.join(dst, name))
    return written


def _same(src: str, dst: str, st: os.stat_result) -> bool:
    try:
        have = os.lstat(dst)
    except OSError:
        return False
    if stat.S_IFMT(have.st_mode) != stat.S_IFMT(st.st_mode):
        return False
    if stat.S_ISLNK(st.st_mode):
        return os.readlink(src) == os.readlink(dst)
    if stat.S_IMODE(have.st_mode) != stat.S_IMODE(st.st_mode) or have.st_size != st.st_size:
        return False
    return filecmp.cmp(src, dst, shallow=False)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
