"""The `pvc` source: a copy of a directory of the user's claim (`$TORCHRUN_SOURCE_DIR/<sub-path>`).

What this module guarantees:
- The sub-path is relative and stays in the claim (`..`, or a symlink out of the claim, is
  refused); a missing one, or one that is not a directory, is `SourceNotFound`.
- The tree is copied as it is: directories, regular files and symlinks that stay in the tree (as
  symlinks). Modes follow the upload's rule (controller.sync.archive), so a tree gives workers the
  same files whichever way it came: files 0644 plus their execute bits, directories 0755; never
  set-id bits, and nothing a worker running as another uid could not read. A symlink that is
  absolute or leaves the tree — by its text, or by where it really resolves in the claim — is
  `InvalidArchive`, and so is a device, fifo or socket, or `.sync_success` at the top: the rules
  an uploaded archive meets.
- Nothing is followed that was swapped in after it was checked: the walk opens each entry
  relative to its directory without following links and judges what it opened (`_Copier`).
- Limits: every entry is charged to the `Tally` before it is copied, so an oversized tree stops
  with `ArchiveTooLarge` before it fills the volume.
- A source that cannot be read is `SourceNotFound` ("cannot read ..."); the workspace volume
  failing to take the copy is left to `publish`, which makes it `WorkspaceError`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from controller.sync import names
from controller.sync.errors import INVALID_ARCHIVE, SOURCE_NOT_FOUND, SyncError
from controller.sync.generations import Marker, publish
from controller.sync.limits import Limits, Stats, Tally
from controller.sync.request import FetchRequest
from controller.sync.tree import check_symlink_inside

_CHUNK = 1 << 20


def fetch(request: FetchRequest) -> Marker:
    """Publish `request.source_dir/request.sub_path` as generation `request.generation`."""

    def fill(tmp: Path) -> Stats:
        return copy(tmp, request.source_dir, request.sub_path, request.limits)

    return publish(request.workspace, request.generation, fill, source="pvc")


def copy(dest: Path, claim: Path, sub_path: str | None, limits: Limits) -> Stats:
    """Copy `claim/sub_path` into the empty directory `dest`."""
    source = source_dir(claim, sub_path)
    copier = _Copier(source, limits)
    try:
        root = os.open(source, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise _unreadable(PurePosixPath("."), e) from None
    try:
        if not _inside(Path(os.path.realpath(f"/proc/self/fd/{root}")), claim.resolve()):
            raise SyncError(SOURCE_NOT_FOUND, f"sub-path {sub_path!r} became a link out of the claim")
        copier.copy_dir(root, dest, PurePosixPath())
    finally:
        os.close(root)
    return copier.tally.stats()


def source_dir(claim: Path, sub_path: str | None) -> Path:
    """The directory to copy, checked: relative, inside the claim, existing."""
    rel = PurePosixPath(sub_path or ".")
    if rel.is_absolute() or ".." in rel.parts:
        raise SyncError(SOURCE_NOT_FOUND, f"sub-path {sub_path!r} must be a relative path inside the claim")
    if not claim.is_dir():
        raise SyncError(SOURCE_NOT_FOUND, f"no source claim at {claim}")
    source = claim / rel
    shown = f"sub-path {str(rel)!r} of the source claim"
    if not source.exists():
        raise SyncError(SOURCE_NOT_FOUND, f"{shown} does not exist")
    if not source.is_dir():
        raise SyncError(SOURCE_NOT_FOUND, f"{shown} is not a directory")
    if not _inside(source.resolve(), claim.resolve()):
        raise SyncError(SOURCE_NOT_FOUND, f"{shown} is a link out of the claim")
    return source


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class _Copier:
    """Walks the source by file descriptors: each entry is opened relative to its directory's,
    never following a link (`O_NOFOLLOW`), and judged by what was opened (`fstat`), so an entry
    swapped for a symlink or a fifo after it was listed is refused, never followed."""

    def __init__(self, root: Path, limits: Limits) -> None:
        self._root = str(root)
        self._real_root = os.path.realpath(root)
        self.tally = Tally(limits)

    def copy_dir(self, src: int, dst: Path, rel: PurePosixPath) -> None:
        try:
            entries = sorted(entry.name for entry in os.scandir(src))
        except OSError as e:
            raise _unreadable(rel, e) from None
        for name in entries:
            self._copy_entry(src, name, dst / name, rel / name)

    def _copy_entry(self, parent: int, name: str, dst: Path, rel: PurePosixPath) -> None:
        names.check_reserved(rel.parts, str(rel))
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError as e:
            raise _unreadable(rel, e) from None
        self.tally.add(st.st_size if stat.S_ISREG(st.st_mode) else 0)
        if stat.S_ISLNK(st.st_mode):
            self._copy_link(parent, name, dst, rel)
        elif stat.S_ISDIR(st.st_mode):
            child = self._open(parent, name, rel, os.O_DIRECTORY, stat.S_ISDIR)
            try:
                dst.mkdir(0o755)
                os.chmod(dst, 0o755)  # whatever the umask
                self.copy_dir(child, dst, rel)
            finally:
                os.close(child)
        elif stat.S_ISREG(st.st_mode):
            self._copy_file(
                self._open(parent, name, rel, 0, stat.S_ISREG), dst, rel, 0o644 | (st.st_mode & 0o111)
            )
        else:
            raise SyncError(INVALID_ARCHIVE, f"{rel}: a device, fifo or socket")

    def _open(
        self, parent: int, name: str, rel: PurePosixPath, flags: int, kind: Callable[[int], bool]
    ) -> int:
        """`name` in `parent`, opened without following a link (and without blocking on a fifo),
        and still of the `kind` it was listed as: else `InvalidArchive` (it changed under us)."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | flags, dir_fd=parent)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise SyncError(INVALID_ARCHIVE, f"{rel} was replaced while it was copied") from None
            raise _unreadable(rel, e) from None
        if not kind(os.fstat(fd).st_mode):
            os.close(fd)
            raise SyncError(INVALID_ARCHIVE, f"{rel} was replaced while it was copied")
        return fd

    def _copy_link(self, parent: int, name: str, dst: Path, rel: PurePosixPath) -> None:
        try:
            target = os.readlink(name, dir_fd=parent)
        except OSError as e:
            raise _unreadable(rel, e) from None
        # by its text (what a reader of the copy follows) and by where it resolves in the claim
        names.symlink_target(rel.parts, target, str(rel))
        check_symlink_inside(os.path.join(self._root, str(rel)), self._real_root, str(rel))
        os.symlink(target, dst)

    def _copy_file(self, fd: int, dst: Path, rel: PurePosixPath, mode: int) -> None:
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as reader, open(dst, "xb") as writer:
            for chunk in _chunks(reader, rel):
                writer.write(chunk)
        os.chmod(dst, mode)


def _chunks(reader: BinaryIO, rel: PurePosixPath) -> Iterator[bytes]:
    while True:
        try:
            chunk = reader.read(_CHUNK)
        except OSError as e:
            raise _unreadable(rel, e) from None
        if not chunk:
            return
        yield chunk


def _unreadable(rel: PurePosixPath, e: OSError) -> SyncError:
    return SyncError(SOURCE_NOT_FOUND, f"cannot read {rel} in the source claim: {e.strerror}")
