"""Archives for the sync program's tests: a small builder, and a catalogue of hostile ones.

`tar_gz(entries)` writes exactly the entries given (tarfile's writer does not sanitise names, so
`../x` or `/etc/x` land in the archive as written). `HOSTILE` maps a case name to the archive's
bytes and the reason and message fragment the sync program must refuse it with.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str = "file"  # file, dir, symlink, hardlink, chr, blk, fifo
    data: bytes = b""
    target: str = ""
    mode: int = 0o644


def file(name: str, data: bytes = b"x", mode: int = 0o644) -> Entry:
    return Entry(name, "file", data, mode=mode)


def directory(name: str) -> Entry:
    return Entry(name, "dir", mode=0o755)


def symlink(name: str, target: str) -> Entry:
    return Entry(name, "symlink", target=target)


def hardlink(name: str, target: str) -> Entry:
    return Entry(name, "hardlink", target=target)


_TYPES = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "chr": tarfile.CHRTYPE,
    "blk": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
}


def tar(entries: Iterable[Entry], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """An uncompressed tar of exactly these entries, in this order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as archive:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = _TYPES[e.kind]
            info.mode = e.mode
            info.linkname = e.target
            if e.kind in ("chr", "blk"):
                info.devmajor, info.devminor = 1, 3
            info.size = len(e.data) if e.kind == "file" else 0
            archive.addfile(info, io.BytesIO(e.data) if e.kind == "file" else None)
    return out.getvalue()


def tar_gz(entries: Iterable[Entry]) -> bytes:
    """A gzip-compressed tar (header mtime 0, like the plugin writes) of exactly these entries."""
    return gzip.compress(tar(entries), mtime=0)


GOOD_ENTRIES = (
    directory("pkg"),
    file("pkg/__init__.py", b""),
    file("pkg/train.py", b"print('train')\n" * 100),
    file("run.sh", b"#!/bin/sh\necho run\n", mode=0o4755),  # setuid is dropped, exec bits kept
    symlink("latest.py", "pkg/train.py"),
    hardlink("pkg/copy.py", "pkg/train.py"),
)


def good_archive() -> bytes:
    return tar_gz(GOOD_ENTRIES)


def _many(n: int) -> list[Entry]:
    return [file(f"f{i}", b"x") for i in range(n)]


# limits the hostile "over" cases are run with
SMALL_MAX_BYTES = 1000
SMALL_MAX_FILES = 5

HOSTILE: dict[str, tuple[bytes, str, str]] = {
    "traversal": (tar_gz([file("../x")]), "InvalidArchive", "path traversal"),
    "traversal-inside": (tar_gz([file("a/../../x")]), "InvalidArchive", "path traversal"),
    "absolute": (tar_gz([file("/etc/x")]), "InvalidArchive", "absolute path"),
    "symlink-escaping": (tar_gz([symlink("evil", "../../etc/passwd")]), "InvalidArchive", "leaves the tree"),
    "symlink-absolute": (tar_gz([symlink("evil", "/etc/passwd")]), "InvalidArchive", "absolute target"),
    "symlink-via-symlink": (
        tar_gz([directory("d"), symlink("d/up", ".."), symlink("d/up/x", "../y")]),
        "InvalidArchive",
        "goes through a symlink",
    ),
    "symlink-chain-escaping": (
        tar_gz([symlink("a", "x/../y"), symlink("x", ".")]),  # lexically "y"; really ../y
        "InvalidArchive",
        "leaves the tree",
    ),
    "write-through-symlink": (
        tar_gz([symlink("d", "."), file("d/x")]),
        "InvalidArchive",
        "goes through a symlink",
    ),
    "hardlink-escaping": (
        tar_gz([hardlink("evil", "../../etc/passwd")]),
        "InvalidArchive",
        "leaves the tree",
    ),
    "hardlink-absolute": (tar_gz([hardlink("evil", "/etc/passwd")]), "InvalidArchive", "leaves the tree"),
    "hardlink-unseen": (
        tar_gz([hardlink("early", "later"), file("later")]),
        "InvalidArchive",
        "not an earlier file",
    ),
    "char-device": (tar_gz([Entry("null", "chr")]), "InvalidArchive", "device file"),
    "block-device": (tar_gz([Entry("sda", "blk")]), "InvalidArchive", "device file"),
    "fifo": (tar_gz([Entry("pipe", "fifo")]), "InvalidArchive", "fifo"),
    "duplicate": (tar_gz([file("a"), file("b"), file("./a")]), "InvalidArchive", "duplicate entry"),
    "duplicate-dir": (tar_gz([directory("d"), directory("d/")]), "InvalidArchive", "duplicate entry"),
    "file-over-dir": (tar_gz([file("d/x"), file("d")]), "InvalidArchive", "duplicate entry"),
    "reserved-marker": (tar_gz([file(".sync_success", b"{}")]), "InvalidArchive", "reserved name"),
    "reserved-marker-dir": (tar_gz([file(".sync_success/a")]), "InvalidArchive", "reserved name"),
    "over-size": (tar_gz([file("big", b"x" * (SMALL_MAX_BYTES + 1))]), "ArchiveTooLarge", "bytes"),
    "over-file-count": (tar_gz(_many(SMALL_MAX_FILES + 1)), "ArchiveTooLarge", "entries"),
    "empty-archive": (tar_gz([]), "InvalidArchive", "empty archive"),
    "empty-gzip": (gzip.compress(b"", mtime=0), "InvalidArchive", "empty archive"),
    "truncated-gzip": (good_archive()[:-40], "InvalidArchive", "truncated"),
    "truncated-tar-data": (
        gzip.compress(tar([file("a", b"y" * 900), file("b")])[:1024], mtime=0),
        "InvalidArchive",
        "truncated",
    ),
    "truncated-tar-header": (
        gzip.compress(tar([file("a", b"y" * 900), file("b")])[: 1536 + 100], mtime=0),
        "InvalidArchive",
        "truncated",
    ),
    "no-end-marker": (
        gzip.compress(tar([file("a", b"y" * 900), file("b")])[:1536], mtime=0),
        "InvalidArchive",
        "no end-of-archive marker",
    ),
    "garbage": (bytes(range(256)) * 8, "InvalidArchive", "corrupt gzip data"),
    "gzip-of-garbage": (
        gzip.compress(bytes(range(256)) * 8, mtime=0),
        "InvalidArchive",
        "corrupt tar header",
    ),
    "trailing-garbage": (good_archive() + b"\x00garbage", "InvalidArchive", "corrupt gzip data"),
}
