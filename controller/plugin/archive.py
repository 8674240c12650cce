"""The packer's second half: the deterministic `.tar.gz` of docs/workspace.md and its SHA-256.

Guarantees: the same tree (paths, contents, permission bits, symlink targets) gives the same
bytes, whatever the files' mtimes, owners or the order the file system lists them — entries are
written in `scan`'s sorted order as POSIX (pax) tar with mtime 0, uid/gid 0 and no user or group
names, and the gzip header carries mtime 0 and no file name. The checksum is of the compressed
bytes, exactly what `receive --sha256` verifies and `status.workspaceSha256` reports. Each file's
own SHA-256 is taken from the same read (`Archive.file_sha256`), so a delta's manifest describes
exactly the archived content. Memory does not grow with the archive: files are streamed into the
output in chunks.
"""

from __future__ import annotations

import gzip
import hashlib
import tarfile
from dataclasses import dataclass, field
from typing import BinaryIO

from controller.plugin.pack import Entry, Tree

COMPRESS_LEVEL = 6  # zlib's default: most of level 9's ratio at a fraction of its time


@dataclass(frozen=True)
class Archive:
    """A written archive: its size and checksum, and what it holds."""

    sha256: str
    size: int  # compressed bytes: what `receive --size` reads
    files: int
    bytes: int  # uncompressed file bytes
    file_sha256: dict[str, str] = field(default_factory=dict, compare=False)  # path -> content SHA-256


class _HashingWriter:
    """A write-only file object that counts and hashes what passes through to `out`."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self._hash.update(data)
        self.size += len(data)
        self._out.write(data)
        return len(data)

    def flush(self) -> None:
        self._out.flush()

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class _HashingReader:
    """A file read through: hashes what tarfile reads from it."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.hash = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.hash.update(data)
        return data


def _tarinfo(entry: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.path)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = entry.mode
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "symlink":
        info.type = tarfile.SYMTYPE
        info.linkname = entry.link
    else:
        info.size = entry.size
    return info


def write_archive(tree: Tree, out: BinaryIO) -> Archive:
    """Write `tree`'s archive to `out` and return its checksum and size (see the module doc).

    A file whose size changed since `scan` fails the write (`OSError` from tarfile), so the
    archive never disagrees with the listing that was checked."""
    hashing = _HashingWriter(out)
    file_sha256: dict[str, str] = {}
    gz = gzip.GzipFile(filename="", mode="wb", fileobj=hashing, mtime=0, compresslevel=COMPRESS_LEVEL)
    with gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for entry in tree.entries:
            info = _tarinfo(entry)
            if entry.kind == "file":
                with open(tree.root / entry.path, "rb") as f:
                    reading = _HashingReader(f)
                    tar.addfile(info, reading)  # read() is all tarfile uses
                    file_sha256[entry.path] = reading.hash.hexdigest()
            else:
                tar.addfile(info)
    files = tree.files
    return Archive(
        sha256=hashing.hexdigest(),
        size=hashing.size,
        files=len(files),
        bytes=sum(e.size for e in files),
        file_sha256=file_sha256,
    )
