"""Removing a tree we wrote: without recursion and without following symlinks.

`shutil.rmtree` recurses once per directory level (and `os.walk` too, before Python 3.12), so a
hostile archive of a few thousand nested directories would make cleaning up after it raise
`RecursionError` and leave its temp dir behind. `remove_tree` keeps an explicit stack; it is
best effort (errors are skipped, as with `ignore_errors=True`), and it never follows a symlink.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def remove_tree(path: Path | str) -> None:
    """Remove `path` and everything under it, as far as possible."""
    pending = [str(path)]
    directories: list[str] = []
    while pending:
        directory = pending.pop()
        directories.append(directory)
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                else:
                    os.unlink(entry.path)
    for directory in reversed(directories):  # children were listed after their parents
        with contextlib.suppress(OSError):
            os.rmdir(directory)
