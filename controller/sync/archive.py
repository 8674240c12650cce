"""Checking and extracting a tar archive as it streams in, one member at a time.

`extract_archive(stream, dest, limits)` reads a `.tar.gz` (or plain `.tar`) from `stream` until
its end and writes its tree into `dest` (an existing, empty directory). Every member is judged by
this module before tarfile is asked for its data (tarfile's extraction and its filters are never
used). Refused, with `SyncError` and a one-line reason: absolute paths, `..`, a path through a
symlink or a file, symlinks whose target leaves the tree (lexically per member, and by real
resolution once all are written), hardlinks to anything but an earlier regular file, devices,
fifos and other special types, duplicate entries (after normalisation), the reserved top-level
`.sync_success`, an empty archive, corrupt or truncated data, and more entries or bytes than
`limits` allow (`ArchiveTooLarge`, charged from the header before the data is written).

What is written: directories 0755; regular files by streaming copy, mode 0644 plus the archive's
execute bits (never setuid, setgid or sticky; readable by any uid the workers run as); symlinks
and hardlinks as such. Nothing is written outside `dest`: every parent is a directory this
extraction created, and files are opened with O_EXCL|O_NOFOLLOW. Memory does not grow with the
archive's size; it grows with its entry count by one short string per entry (for duplicates).
Decompression runs in a read-ahead thread (`prefetch`), stopped before this function returns.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import IO, Any, cast

from controller.sync.errors import INVALID_ARCHIVE, SyncError
from controller.sync.gunzip import GunzipReader, Readable
from controller.sync.limits import Limits, Stats, Tally
from controller.sync.names import check_reserved, normalize, symlink_target
from controller.sync.prefetch import Prefetcher
from controller.sync.tarheader import MissingEndError, StrictTarInfo
from controller.sync.tree import check_symlink_inside

COPY_CHUNK = 256 * 1024
TAR_BUFSIZE = 16 * 1024
# bytes allowed after the end-of-archive marker (tar pads to its record size, 10 KiB by default)
MAX_TRAILING = 1024 * 1024

_DIR, _IMPLICIT_DIR, _FILE, _SYMLINK = "d", "D", "f", "l"
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def extract_archive(stream: Readable, dest: Path, limits: Limits, *, compression: str = "gz") -> Stats:
    """Extract the archive read from `stream` into empty directory `dest`; see the module docstring.

    `compression` is "gz" (gzip, its CRC checked) or "none" (a plain tar).
    """
    if compression not in ("gz", "none"):
        raise ValueError(f"unknown compression {compression!r}")
    data = Prefetcher(GunzipReader(stream) if compression == "gz" else stream)
    writer = _TreeWriter(dest, limits)
    try:
        _extract_members(data, writer)
        if writer.tally.files == 0:
            raise SyncError(INVALID_ARCHIVE, "empty archive")
        writer.check_symlinks()
        _drain_trailing(data)
    finally:
        data.close()
    return writer.tally.stats()


def _extract_members(data: Readable, writer: _TreeWriter) -> None:
    try:
        with tarfile.open(
            fileobj=cast(IO[bytes], data), mode="r|", tarinfo=StrictTarInfo, bufsize=TAR_BUFSIZE
        ) as archive:
            while (member := archive.next()) is not None:
                cast(Any, archive).members.clear()  # tarfile keeps every member; we need none
                writer.add(member, archive)
    except MissingEndError as e:
        raise SyncError(INVALID_ARCHIVE, "empty archive") if writer.tally.files == 0 else e from None
    except tarfile.StreamError as e:
        if writer.tally.files == 0:  # Python 3.10 on a tar of nothing but its end marker
            raise SyncError(INVALID_ARCHIVE, "empty archive") from e
        raise SyncError(INVALID_ARCHIVE, f"corrupt or truncated archive: {e}") from e
    except (tarfile.TarError, EOFError, UnicodeError, ValueError, RecursionError) as e:
        raise SyncError(INVALID_ARCHIVE, f"corrupt or truncated archive: {e}") from e


def _drain_trailing(data: Readable) -> None:
    """Read what follows the end-of-archive marker (checking the gzip trailer); refuse too much."""
    seen = 0
    while chunk := data.read(COPY_CHUNK):
        seen += len(chunk)
        if seen > MAX_TRAILING:
            raise SyncError(INVALID_ARCHIVE, "more than 1 MiB of data after the end of the archive")


class _TreeWriter:
    """Judges each member against what was already written, then writes it under `dest`."""

    def __init__(self, dest: Path, limits: Limits) -> None:
        self.root = str(dest)
        self.tally = Tally(limits)
        self.kinds: dict[str, str] = {}  # normalised path -> kind of what we wrote there
        self.symlinks: list[str] = []

    def add(self, member: tarfile.TarInfo, archive: tarfile.TarFile) -> None:
        parts = normalize(member.name)
        if not parts:
            if member.isdir():
                return  # "./": the root itself
            raise SyncError(INVALID_ARCHIVE, f"entry with an empty name ({member.name!r})")
        check_reserved(parts, member.name)
        _check_type(member)
        key = "/".join(parts)
        if self._reopen_implicit_dir(key, member):
            return
        if key in self.kinds:
            raise SyncError(INVALID_ARCHIVE, f"duplicate entry {member.name!r}")
        self._ensure_parent(parts, member.name)
        self.tally.add(member.size if member.isreg() else 0)
        path = os.path.join(self.root, key)
        if member.isdir():
            os.mkdir(path, 0o755)
            self.kinds[key] = _DIR
        elif member.issym():
            self._symlink(parts, key, path, member)
        elif member.islnk():
            self._hardlink(key, path, member)
        else:
            _write_file(path, member, archive)
            self.kinds[key] = _FILE

    def _reopen_implicit_dir(self, key: str, member: tarfile.TarInfo) -> bool:
        """A directory entry for a directory we created as a parent: accepted once."""
        if member.isdir() and self.kinds.get(key) == _IMPLICIT_DIR:
            self.kinds[key] = _DIR  # already counted when it was created
            return True
        return False

    def _ensure_parent(self, parts: tuple[str, ...], name: str) -> None:
        """Make sure every parent of `parts` is a directory we created (creating missing ones)."""
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            kind = self.kinds.get(prefix)
            if kind in (_DIR, _IMPLICIT_DIR):
                continue
            if kind is not None:
                what = "a symlink" if kind == _SYMLINK else "a file"
                raise SyncError(INVALID_ARCHIVE, f"{name!r} goes through {what} ({prefix!r})")
            self.tally.add()
            os.mkdir(os.path.join(self.root, prefix), 0o755)
            self.kinds[prefix] = _IMPLICIT_DIR

    def _symlink(self, parts: tuple[str, ...], key: str, path: str, member: tarfile.TarInfo) -> None:
        symlink_target(parts, member.linkname, member.name)
        os.symlink(member.linkname, path)
        self.kinds[key] = _SYMLINK
        self.symlinks.append(key)

    def _hardlink(self, key: str, path: str, member: tarfile.TarInfo) -> None:
        try:
            target = "/".join(normalize(member.linkname))
        except SyncError as e:
            raise SyncError(INVALID_ARCHIVE, f"hardlink {member.name!r} leaves the tree ({e.message})") from e
        if self.kinds.get(target) != _FILE:
            raise SyncError(
                INVALID_ARCHIVE, f"hardlink {member.name!r} -> {member.linkname!r}: not an earlier file"
            )
        os.link(os.path.join(self.root, target), path, follow_symlinks=False)
        self.kinds[key] = _FILE

    def check_symlinks(self) -> None:
        """Every symlink's real resolution, now that the whole tree exists, stays inside it."""
        real_root = os.path.realpath(self.root)
        for key in self.symlinks:
            check_symlink_inside(os.path.join(self.root, key), real_root, key)


def _check_type(member: tarfile.TarInfo) -> None:
    if member.ischr() or member.isblk():
        raise SyncError(INVALID_ARCHIVE, f"device file {member.name!r}")
    if member.isfifo():
        raise SyncError(INVALID_ARCHIVE, f"fifo {member.name!r}")
    if member.size < 0:
        raise SyncError(INVALID_ARCHIVE, f"negative size for {member.name!r}")
    if member.sparse is not None:
        raise SyncError(INVALID_ARCHIVE, f"sparse file {member.name!r} is not supported")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise SyncError(INVALID_ARCHIVE, f"unsupported entry type {member.type!r} ({member.name!r})")


def _write_file(path: str, member: tarfile.TarInfo, archive: tarfile.TarFile) -> None:
    """Stream the member's data into a new file at `path` (never through an existing name).

    The data is read straight from the archive's stream, where `next()` left it (what tarfile's
    own extraction does), without a file object per member.
    """
    read = archive.fileobj.read
    fd = os.open(path, _OPEN_FLAGS, 0o600)
    try:
        remaining = member.size
        while remaining > 0:
            chunk = read(min(COPY_CHUNK, remaining))
            if not chunk:
                raise SyncError(INVALID_ARCHIVE, f"truncated data in {member.name!r}")
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
            remaining -= len(chunk)
        os.fchmod(fd, 0o644 | (member.mode & 0o111))
    finally:
        os.close(fd)
