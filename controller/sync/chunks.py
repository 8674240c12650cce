"""Content-defined chunks of a file, and the ops that rebuild a changed file from the old one's.

A one-line edit must not resend the whole file, and it moves every byte after it, so chunks end
where the content says, not at fixed offsets: after a line (`\\n`) whose CRC-32 has its low four
bits zero, once the chunk holds at least `MIN_CHUNK` bytes, and at `MAX_CHUNK` bytes whatever
the content (a file without newlines is cut at fixed offsets). Both sides chunk alike, so the
chunks before and after an edit are the same and only the one around it differs. A chunk is
named by the first 16 hex digits of its SHA-256; a collision can only make the rebuilt file's
full SHA-256 mismatch, which refuses it.

The ops that rebuild one file, in order: `L` + 4-byte length + that many bytes (at most
`MAX_LITERAL`), `C` + 4-byte index of a chunk of the old file, `E` (the end). Lengths and
indices are big-endian. Files over `CHUNKED_MAX` are never chunked: sent whole when changed.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from controller.sync.errors import INVALID_ARCHIVE, SyncError
from controller.sync.gunzip import Readable

MIN_CHUNK = 512
MAX_CHUNK = 64 * 1024
BOUNDARY_MASK = 0xF  # about one line in 16 ends a chunk (past MIN_CHUNK)
CHUNKED_MAX = 16 * 1024 * 1024
MAX_LITERAL = 1024 * 1024
ID_LENGTH = 16
LITERAL, COPY, END = b"L", b"C", b"E"
_U32 = struct.Struct(">I")


def boundaries(data: bytes) -> list[int]:
    """The end offset of each chunk of `data` (see the module docstring); [] for no data."""
    ends: list[int] = []
    start = pos = 0
    n = len(data)
    while pos < n:
        limit = min(n, start + MAX_CHUNK)
        newline = data.find(b"\n", pos, limit)
        if newline < 0:
            ends.append(limit)
            start = pos = limit
            continue
        line_end = newline + 1
        if line_end - start >= MIN_CHUNK and zlib.crc32(data[pos:line_end]) & BOUNDARY_MASK == 0:
            ends.append(line_end)
            start = line_end
        pos = line_end
    if start < n:
        ends.append(n)
    return ends


def spans(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each chunk."""
    out: list[tuple[int, int]] = []
    start = 0
    for end in boundaries(data):
        out.append((start, end - start))
        start = end
    return out


def chunk_id(piece: bytes) -> str:
    return hashlib.sha256(piece).hexdigest()[:ID_LENGTH]


def chunk_ids(data: bytes) -> list[str]:
    return [chunk_id(data[offset : offset + length]) for offset, length in spans(data)]


def literal(data: bytes) -> Iterator[bytes]:
    """`L` ops carrying `data`."""
    for start in range(0, len(data), MAX_LITERAL):
        piece = data[start : start + MAX_LITERAL]
        yield LITERAL + _U32.pack(len(piece)) + piece


def whole_file_ops(f: BinaryIO) -> Iterator[bytes]:
    """The ops of a file sent whole, read in `MAX_LITERAL` pieces (memory does not grow with it)."""
    while piece := f.read(MAX_LITERAL):
        yield LITERAL + _U32.pack(len(piece)) + piece
    yield END


def delta_ops(data: bytes, old_ids: Sequence[str]) -> Iterator[bytes]:
    """The ops that rebuild `data` from the old file's chunks `old_ids` plus literals."""
    index = {cid: i for i, cid in reversed(list(enumerate(old_ids)))}
    pending = bytearray()
    for offset, length in spans(data):
        piece = data[offset : offset + length]
        found = index.get(chunk_id(piece))
        if found is None:
            pending += piece
            continue
        if pending:
            yield from literal(bytes(pending))
            pending.clear()
        yield COPY + _U32.pack(found)
    if pending:
        yield from literal(bytes(pending))
    yield END


def read_op(stream: Readable) -> tuple[bytes, int]:
    """The next op: (`L`, length) — its bytes follow — (`C`, index) or (`E`, 0)."""
    tag = read_exactly(stream, 1)
    if tag == END:
        return END, 0
    if tag not in (LITERAL, COPY):
        raise SyncError(INVALID_ARCHIVE, f"delta: unknown op {tag!r}")
    (value,) = _U32.unpack(read_exactly(stream, 4))
    if tag == LITERAL and value > MAX_LITERAL:
        raise SyncError(INVALID_ARCHIVE, f"delta: literal of {value} bytes")
    return tag, value


def read_exactly(stream: Readable, n: int) -> bytes:
    data = b""
    while len(data) < n:
        more = stream.read(n - len(data))
        if not more:
            raise SyncError(INVALID_ARCHIVE, "delta: data ended inside an op")
        data += more
    return data
