"""Streaming gzip decompression that notices truncation and bombs.

`GunzipReader(source).read(n)` returns decompressed bytes (b"" at the end). Unlike tarfile's own
`r|gz`, which never checks the gzip trailer, it verifies each member's CRC and length (zlib does,
with `wbits=31`) and refuses (`InvalidArchive`) data that ends inside a member, corrupt data, and
garbage after a member. Concatenated members are read as one stream, as gzip does. Memory is
bounded: at most `IN_CHUNK` compressed and `OUT_CHUNK` decompressed bytes are held beyond what the
caller asked for, whatever the compression ratio.
"""

from __future__ import annotations

import zlib
from typing import Protocol

from controller.sync.errors import INVALID_ARCHIVE, SyncError

IN_CHUNK = 256 * 1024
OUT_CHUNK = 1024 * 1024
_GZIP_WBITS = 16 + zlib.MAX_WBITS


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class GunzipReader:
    """Decompressed view of a gzip byte stream; see the module docstring."""

    def __init__(self, source: Readable) -> None:
        self._source = source
        self._inflate = zlib.decompressobj(_GZIP_WBITS)
        self._input = b""
        self._buf = bytearray()
        self._done = False
        self.compressed = 0  # compressed bytes taken from the source
        self.produced = 0  # decompressed bytes handed out

    def read(self, size: int = -1, /) -> bytes:
        want = OUT_CHUNK if size is None or size < 0 else size
        while len(self._buf) < want and not self._done:
            self._fill()
        out = bytes(self._buf[:want])
        del self._buf[:want]
        self.produced += len(out)
        return out

    def _fill(self) -> None:
        if not self._input:
            self._input = self._source.read(IN_CHUNK)
            self.compressed += len(self._input)
            if not self._input:
                self._end_of_input()
                return
        if self._inflate.eof:  # the previous member ended and more data follows: the next member
            self._inflate = zlib.decompressobj(_GZIP_WBITS)
        try:
            self._buf += self._inflate.decompress(self._input, OUT_CHUNK)
        except zlib.error as e:
            raise SyncError(INVALID_ARCHIVE, f"corrupt gzip data: {e}") from e
        if self._inflate.eof:
            self._input = self._inflate.unused_data
        else:
            self._input = self._inflate.unconsumed_tail

    def _end_of_input(self) -> None:
        if self.compressed == 0:
            raise SyncError(INVALID_ARCHIVE, "empty archive (no data)")
        if not self._inflate.eof:
            raise SyncError(INVALID_ARCHIVE, "truncated gzip data")
        self._done = True
