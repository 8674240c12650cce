"""Entry names and link targets, judged as text before anything touches the disk.

`normalize(name)` turns an archive path into its components, refusing absolute paths and `..`;
`symlink_target(name, target)` refuses a symlink whose target is absolute or climbs out of the
tree (lexically; `tree.check_tree` / the extractor's final pass check the real resolution, which
differs when a target goes through another symlink). All refusals are `InvalidArchive`.
"""

from __future__ import annotations

import posixpath

from controller.sync.errors import INVALID_ARCHIVE, SyncError
from controller.sync.layout import MARKER

RESERVED_TOP_LEVEL = frozenset({MARKER})


def normalize(name: str) -> tuple[str, ...]:
    """The components of archive path `name` ("./a//b/" -> ("a", "b")); () is the root itself."""
    if "\x00" in name:
        raise SyncError(INVALID_ARCHIVE, f"NUL byte in entry name {name!r}")
    if name.startswith("/"):
        raise SyncError(INVALID_ARCHIVE, f"absolute path {name!r}")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise SyncError(INVALID_ARCHIVE, f"path traversal in {name!r}")
    return parts


def check_reserved(parts: tuple[str, ...], name: str) -> None:
    """Refuse a reserved top-level name, as the entry itself or as its top directory."""
    if parts and parts[0] in RESERVED_TOP_LEVEL:
        raise SyncError(INVALID_ARCHIVE, f"reserved name {name!r}")


def symlink_target(parts: tuple[str, ...], target: str, name: str) -> None:
    """Refuse the symlink `name` (components `parts`) -> `target` unless it stays in the tree."""
    if not target or "\x00" in target:
        raise SyncError(INVALID_ARCHIVE, f"symlink {name!r} has an empty or invalid target")
    if target.startswith("/"):
        raise SyncError(INVALID_ARCHIVE, f"symlink {name!r} has an absolute target {target!r}")
    resolved = posixpath.normpath(posixpath.join(*parts[:-1], target) if parts[:-1] else target)
    if resolved == ".." or resolved.startswith("../"):
        raise SyncError(INVALID_ARCHIVE, f"symlink {name!r} -> {target!r} leaves the tree")
