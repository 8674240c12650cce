"""Receiving a delta: only what the workspace lacks, the rest taken from the newest published
generation (`python -m controller.sync delta`, docs/workspace.md).

The exchange, on the exec session's stdin and stdout:
1. in: the tree's manifest (`manifest`), gzip-compressed, exactly `--manifest-size` bytes; decoded
   it must have SHA-256 `--manifest-sha256` (the tree digest) and pass `manifest.decode`.
2. out: one JSON line, the answer. `{"base": null}` when no published generation can serve
   (none, unreadable, more entries than the limits allow): the command ends there, exit 0,
   nothing written, and the plugin sends the archive with `receive`. Else
   `{"base": B, "want": [[i, ids], ...]}`: the manifest's files (by index) whose content
   generation B does not hold under any path, each with the chunk ids (`chunks`) of B's file at
   the same path when there is one to rebuild from, else null.
3. in: `SIZE_DIGITS` ASCII digits, the payload's size N, then N bytes: gzip of each wanted file's
   ops, in the answer's order.
4. the tree is assembled in `generations.publish`'s temp dir: directories and symlinks from the
   manifest, files B holds by content linked from B (a copy where the mode differs or the volume
   refuses a hard link), wanted files rebuilt from their ops and B's chunks. Then all of it is
   read back: its manifest's digest must be the declared one (every path, kind, mode, size,
   SHA-256 and link target) and every symlink must resolve inside it. It is published like an
   upload, the marker's `sha256` being `--sha256` (the plugin's archive checksum of this same
   tree, so `status.workspaceSha256` means what it means for `receive`), and the marker's JSON is
   the last stdout line.

Hard links are safe because nothing writes into a published generation: workers mount the volume
read-only and copy out of it, and a sync pod only ever fills a new temp dir. B's files are hashed
before they are offered, and the assembled tree is hashed again, so a damaged B costs bytes (what
it lost is asked for) or a refused delta, never a wrong tree.

A failure is not recorded (no `<G>.failed`): exit 1 with one `Reason: message` line, and the
generation stays free for the plugin's fallback, the full archive through `receive`, which records
its own verdict. Everything is bounded like `receive`: exactly the declared sizes, the idle
timeout on every read, the manifest's decoded size (`manifest.max_encoded_size`), and the limits
charged from the manifest before anything is written.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from controller.sync import chunks, layout
from controller.sync.errors import CHECKSUM_MISMATCH, INVALID_ARCHIVE, SyncError
from controller.sync.generations import Marker, publish, read_marker
from controller.sync.gunzip import GunzipReader
from controller.sync.limits import Limits, Stats
from controller.sync.manifest import (
    DIR,
    DIR_MODE,
    FILE,
    SYMLINK,
    ManifestEntry,
    decode,
    digest,
    encode,
    hash_file,
    manifest_of,
    max_encoded_size,
    walk,
)
from controller.sync.tree import check_symlink_inside
from controller.sync.upload import DEFAULT_IDLE_TIMEOUT, ExactReader, interrupts_end_the_upload

SIZE_DIGITS = 16
COPY_CHUNK = 256 * 1024
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class BaseFile:
    """A regular file of the base generation: its path there, size and mode."""

    path: str
    size: int
    mode: int


@dataclass
class Plan:
    """What a delta takes from the base: `reuse` (file index → a base file with its content),
    `want` (file indices to send, in order) and `rebuild_from` (index → the base file at the same
    path, whose chunks the sender may reuse)."""

    reuse: dict[int, BaseFile] = field(default_factory=dict)
    want: list[int] = field(default_factory=list)
    rebuild_from: dict[int, BaseFile] = field(default_factory=dict)


def plan(
    entries: Sequence[ManifestEntry], by_sha: Mapping[str, BaseFile], by_path: Mapping[str, BaseFile]
) -> Plan:
    """Pure: which files come from the base (by content, any path) and which must be sent."""
    out = Plan()
    for i, entry in enumerate(entries):
        if entry.kind != FILE:
            continue
        held = by_sha.get(entry.sha256)
        if held is not None:
            out.reuse[i] = held
            continue
        out.want.append(i)
        same_path = by_path.get(entry.path)
        if same_path is not None and 0 < same_path.size <= chunks.CHUNKED_MAX:
            out.rebuild_from[i] = same_path
    return out


def receive_delta(
    workspace: Path,
    generation: int,
    *,
    manifest_size: int,
    manifest_sha256: str,
    sha256: str,
    limits: Limits,
    fd: int = 0,
    out: BinaryIO,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> Marker | None:
    """Run the exchange of the module docstring; the marker, or None when there is no base."""
    reader = ExactReader(fd, manifest_size, idle_timeout)
    with interrupts_end_the_upload(reader.cancelled):
        entries = _read_manifest(reader, manifest_sha256.lower(), limits)
        base = _base(workspace, generation, entries, limits)
        if base is None:
            _answer(out, {"base": None})
            return None
        number, base_dir, by_sha, by_path = base
        chosen = plan(entries, by_sha, by_path)
        spans = {i: _spans(base_dir / f.path) for i, f in chosen.rebuild_from.items()}
        want = [[i, [cid for cid, _ in spans[i]] if i in spans else None] for i in chosen.want]
        _answer(out, {"base": number, "want": want})

        def fill(tmp: Path) -> Stats:
            _lay_out(tmp, entries, chosen, base_dir)
            payload = ExactReader(fd, _payload_size(fd, idle_timeout), idle_timeout)
            _rebuild(tmp, entries, chosen, base_dir, spans, GunzipReader(payload))
            return _verify(tmp, entries, manifest_sha256.lower(), limits)

        return publish(workspace, generation, fill, source="upload", sha256=sha256, records_failure=False)


def _read_manifest(reader: ExactReader, expected: str, limits: Limits) -> tuple[ManifestEntry, ...]:
    bound = max_encoded_size(limits)
    gunzip = GunzipReader(reader)
    data = bytearray()
    while chunk := gunzip.read(1024 * 1024):
        data += chunk
        if len(data) > bound:
            raise SyncError(INVALID_ARCHIVE, f"manifest over {bound} bytes decoded")
    reader.drain()
    if digest(bytes(data)) != expected:
        raise SyncError(CHECKSUM_MISMATCH, "the manifest's SHA-256 is not the declared tree digest")
    return decode(bytes(data), limits)


def _base(
    workspace: Path, generation: int, entries: Sequence[ManifestEntry], limits: Limits
) -> tuple[int, Path, dict[str, BaseFile], dict[str, BaseFile]] | None:
    """The newest published generation before `generation`, its files by content (only those of
    a size some wanted file has are hashed) and by path; None when there is none to use."""
    current = layout.read_current(workspace)
    if current is None or current >= generation or read_marker(workspace, current) is None:
        return None
    base_dir = layout.generation_dir(workspace, current)
    sizes = {e.size for e in entries if e.kind == FILE}
    by_sha: dict[str, BaseFile] = {}
    by_path: dict[str, BaseFile] = {}
    seen = 0
    try:
        for rel, st in walk(base_dir):
            seen += 1
            if seen > limits.max_files:
                return None
            if not stat.S_ISREG(st.st_mode):
                continue
            found = BaseFile(rel, st.st_size, stat.S_IMODE(st.st_mode))
            by_path[rel] = found
            if st.st_size in sizes:
                by_sha.setdefault(hash_file(base_dir / rel), found)
    except OSError:
        return None
    return current, base_dir, by_sha, by_path


def _spans(path: Path) -> list[tuple[str, tuple[int, int]]]:
    """Chunk ids and spans of a base file (read once; it is at most `chunks.CHUNKED_MAX`)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    return [(chunks.chunk_id(data[o : o + n]), (o, n)) for o, n in chunks.spans(data)]


def _answer(out: BinaryIO, answer: object) -> None:
    out.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
    out.flush()


def _payload_size(fd: int, idle_timeout: float) -> int:
    header = ExactReader(fd, SIZE_DIGITS, idle_timeout)
    text = b""
    while len(text) < SIZE_DIGITS:
        text += header.read(SIZE_DIGITS - len(text))
    if not text.isdigit():
        raise SyncError(INVALID_ARCHIVE, f"delta: payload size {text[:SIZE_DIGITS]!r} is not a number")
    return int(text)


def _lay_out(tmp: Path, entries: Sequence[ManifestEntry], chosen: Plan, base_dir: Path) -> None:
    """Directories, symlinks and the files the base holds (the manifest's order: parents first)."""
    for i, entry in enumerate(entries):
        path = tmp / entry.path
        if entry.kind == DIR:
            os.mkdir(path, DIR_MODE)
            os.chmod(path, DIR_MODE)
        elif entry.kind == SYMLINK:
            os.symlink(entry.link, path)
        elif i in chosen.reuse:
            _place(base_dir / chosen.reuse[i].path, path, chosen.reuse[i].mode, entry.mode)


def _place(source: Path, target: Path, source_mode: int, mode: int) -> None:
    """The base file at `target`: a hard link when the modes agree and the volume allows one."""
    if source_mode == mode:
        try:
            os.link(source, target, follow_symlinks=False)
            return
        except OSError:
            pass  # a volume without hard links, or a file at its link limit: copy it
    fd = os.open(target, _OPEN_FLAGS, 0o600)
    with os.fdopen(fd, "wb") as dst, open(source, "rb") as src:
        shutil.copyfileobj(src, dst, COPY_CHUNK)
        os.fchmod(dst.fileno(), mode)


def _rebuild(
    tmp: Path,
    entries: Sequence[ManifestEntry],
    chosen: Plan,
    base_dir: Path,
    spans: Mapping[int, list[tuple[str, tuple[int, int]]]],
    ops: GunzipReader,
) -> None:
    """Write every wanted file from its ops; then the payload must end."""
    for i in chosen.want:
        entry = entries[i]
        old = base_dir / chosen.rebuild_from[i].path if i in chosen.rebuild_from else None
        _rebuild_file(tmp / entry.path, entry, ops, old, [span for _, span in spans.get(i, [])])
    if ops.read(1):
        raise SyncError(INVALID_ARCHIVE, "delta: data after the last file")


def _rebuild_file(
    path: Path, entry: ManifestEntry, ops: GunzipReader, old: Path | None, old_spans: list[tuple[int, int]]
) -> None:
    fd = os.open(path, _OPEN_FLAGS, 0o600)
    written = 0
    with os.fdopen(fd, "wb") as f, open(old, "rb") if old else open(os.devnull, "rb") as base:
        while True:
            tag, value = chunks.read_op(ops)
            if tag == chunks.END:
                break
            if tag == chunks.COPY:
                if value >= len(old_spans):
                    raise SyncError(INVALID_ARCHIVE, f"delta: {entry.path!r} names a chunk the base lacks")
                offset, length = old_spans[value]
                base.seek(offset)
                data = base.read(length)
            else:
                data = chunks.read_exactly(ops, value) if value else b""
            written += len(data)
            if written > entry.size:
                raise SyncError(INVALID_ARCHIVE, f"delta: {entry.path!r} is over its {entry.size} bytes")
            f.write(data)
        if written != entry.size:
            raise SyncError(INVALID_ARCHIVE, f"delta: {entry.path!r} has {written} of its {entry.size} bytes")
        os.fchmod(f.fileno(), entry.mode)
    if hash_file(path) != entry.sha256:
        raise SyncError(CHECKSUM_MISMATCH, f"delta: {entry.path!r} is not the declared content")


def _verify(tmp: Path, entries: Sequence[ManifestEntry], expected: str, limits: Limits) -> Stats:
    """Read the assembled tree back: the declared digest, and symlinks that stay inside."""
    if digest(encode(manifest_of(tmp, limits))) != expected:
        raise SyncError(CHECKSUM_MISMATCH, "the assembled tree is not the declared one")
    real_root = os.path.realpath(tmp)
    for entry in entries:
        if entry.kind == SYMLINK:
            check_symlink_inside(str(tmp / entry.path), real_root, entry.path)
    return Stats(files=len(entries), bytes=sum(e.size for e in entries))
