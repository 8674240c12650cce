"""The manifest of a tree: every entry's path, kind, mode, size and SHA-256, in one canonical
encoding whose SHA-256 is the tree's digest (what a delta sync verifies, docs/workspace.md).

Both halves build it alike — the plugin from the project it scanned, the sync program's `delta`
from the tree it assembled on the volume (`manifest_of`) — so one digest says the two trees are the
same. Modes are the ones the workspace keeps (files 0644 plus their execute bits, directories 0755,
symlinks 0777), so a manifest never differs over what extraction would drop anyway.

`decode(data, limits)` trusts nothing: it refuses (`InvalidArchive`) what an archive's member
would be refused for — absolute paths, `..`, a non-canonical spelling, the reserved top-level
name, a symlink whose target leaves the tree, an entry under anything but a directory listed
before it, duplicates or an unsorted list — and charges entries and bytes to `limits`
(`ArchiveTooLarge`) before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.sync.errors import INVALID_ARCHIVE, SyncError
from controller.sync.layout import MARKER
from controller.sync.limits import Limits, Tally
from controller.sync.names import check_reserved, normalize, symlink_target

VERSION = 1
FILE, DIR, SYMLINK = "f", "d", "l"
DIR_MODE, SYMLINK_MODE = 0o755, 0o777
ENTRY_BYTES = 1024  # decoded manifest bytes allowed per entry the limits allow, on average
MAX_MANIFEST_BYTES = 128 * 1024 * 1024  # decoded, whatever the limits: a bigger tree sends its archive
HASH_CHUNK = 1024 * 1024
_HEX = frozenset("0123456789abcdef")


def file_mode(mode: int) -> int:
    """The mode a file keeps in the workspace: 0644 plus its execute bits."""
    return 0o644 | (mode & 0o111)


@dataclass(frozen=True)
class ManifestEntry:
    """One entry: `kind` is FILE (`size`, `sha256`), DIR or SYMLINK (`link`); `mode` as kept."""

    path: str
    kind: str
    mode: int
    size: int = 0
    sha256: str = ""
    link: str = ""

    def to_list(self) -> list[Any]:
        return [self.path, self.kind, self.mode, self.size, self.sha256, self.link]


def encode(entries: Iterable[ManifestEntry]) -> bytes:
    """The canonical bytes of a manifest (entries in the order given: sorted by path)."""
    body = {"version": VERSION, "entries": [e.to_list() for e in entries]}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def digest(encoded: bytes) -> str:
    """The tree's digest: the SHA-256 of its manifest's canonical bytes."""
    return hashlib.sha256(encoded).hexdigest()


def max_encoded_size(limits: Limits) -> int:
    """The most bytes a manifest within `limits` may take, decoded."""
    return min(MAX_MANIFEST_BYTES, 64 + limits.max_files * ENTRY_BYTES)


def decode(data: bytes, limits: Limits) -> tuple[ManifestEntry, ...]:
    """The entries of an encoded manifest, each checked (see the module docstring)."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise SyncError(INVALID_ARCHIVE, f"manifest is not JSON: {e}") from None
    if not (
        isinstance(body, dict) and body.get("version") == VERSION and isinstance(body.get("entries"), list)
    ):
        raise SyncError(INVALID_ARCHIVE, f"manifest is not a version {VERSION} manifest")
    tally = Tally(limits)
    dirs: set[str] = set()
    entries: list[ManifestEntry] = []
    for raw in body["entries"]:
        entry = _entry(raw)
        _check_place(entry, entries[-1].path if entries else None, dirs)
        tally.add(entry.size)
        if entry.kind == DIR:
            dirs.add(entry.path)
        entries.append(entry)
    if not entries:
        raise SyncError(INVALID_ARCHIVE, "empty manifest")
    return tuple(entries)


def _entry(raw: Any) -> ManifestEntry:
    if not (isinstance(raw, list) and len(raw) == 6):
        raise SyncError(INVALID_ARCHIVE, f"manifest entry {str(raw)[:80]!r} is not 6 fields")
    path, kind, mode, size, sha, link = raw
    if not (isinstance(path, str) and isinstance(sha, str) and isinstance(link, str)):
        raise SyncError(INVALID_ARCHIVE, f"manifest entry {path!r} has a field of the wrong type")
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (mode, size)):
        raise SyncError(INVALID_ARCHIVE, f"manifest entry {path!r} has a field of the wrong type")
    entry = ManifestEntry(path, kind, mode, size, sha, link)
    expected = {FILE: file_mode(mode), DIR: DIR_MODE, SYMLINK: SYMLINK_MODE}.get(kind)
    if expected is None or mode != expected:
        raise SyncError(INVALID_ARCHIVE, f"manifest entry {path!r}: kind {kind!r} with mode {mode:o}")
    if kind == FILE and (size < 0 or len(sha) != 64 or not _HEX.issuperset(sha) or link):
        raise SyncError(INVALID_ARCHIVE, f"manifest file {path!r} needs a size and a SHA-256")
    if kind != FILE and (size or sha):
        raise SyncError(INVALID_ARCHIVE, f"manifest entry {path!r} has data but is no file")
    if kind != SYMLINK and link:
        raise SyncError(INVALID_ARCHIVE, f"manifest entry {path!r} has a target but is no symlink")
    return entry


def _check_place(entry: ManifestEntry, previous: str | None, dirs: set[str]) -> None:
    parts = normalize(entry.path)
    if not parts or "/".join(parts) != entry.path:
        raise SyncError(INVALID_ARCHIVE, f"manifest path {entry.path!r} is not canonical")
    check_reserved(parts, entry.path)
    if previous is not None and entry.path <= previous:
        raise SyncError(INVALID_ARCHIVE, f"manifest path {entry.path!r} is a duplicate or out of order")
    parent = "/".join(parts[:-1])
    if parent and parent not in dirs:
        raise SyncError(INVALID_ARCHIVE, f"manifest path {entry.path!r} is not under a listed directory")
    if entry.kind == SYMLINK:
        symlink_target(parts, entry.link, entry.path)


def hash_file(path: str | Path) -> str:
    """The SHA-256 of a file's content, read in chunks (never through a symlink)."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under `root` but the top-level marker, as (relative path, lstat), sorted by
    path; iterative, so depth is bounded by PATH_MAX, not the stack."""
    found: list[tuple[str, os.stat_result]] = []
    pending = [("", str(root))]
    while pending:
        prefix, directory = pending.pop()
        with os.scandir(directory) as it:
            for item in it:
                if not prefix and item.name == MARKER:
                    continue
                rel = prefix + item.name
                st = item.stat(follow_symlinks=False)
                found.append((rel, st))
                if stat.S_ISDIR(st.st_mode):
                    pending.append((rel + "/", item.path))
    return iter(sorted(found, key=lambda pair: pair[0]))


def manifest_of(root: Path, limits: Limits) -> tuple[ManifestEntry, ...]:
    """The manifest of the tree on disk at `root` (every file hashed), its modes as they are;
    `InvalidArchive` for anything that is not a file, directory or symlink."""
    tally = Tally(limits)
    entries: list[ManifestEntry] = []
    for rel, st in walk(root):
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            entries.append(ManifestEntry(rel, DIR, mode))
            tally.add()
        elif stat.S_ISREG(st.st_mode):
            tally.add(st.st_size)
            entries.append(ManifestEntry(rel, FILE, mode, st.st_size, hash_file(root / rel)))
        elif stat.S_ISLNK(st.st_mode):
            entries.append(ManifestEntry(rel, SYMLINK, SYMLINK_MODE, link=os.readlink(root / rel)))
            tally.add()
        else:
            raise SyncError(INVALID_ARCHIVE, f"{rel!r} is not a file, directory or symlink")
    return tuple(entries)
