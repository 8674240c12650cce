"""A stricter tar header reader for `tarfile`: refuses what tarfile would silently accept.

`StrictTarInfo` is passed as `tarinfo=` to `tarfile.open`. Where tarfile, reading a stream, would
take a missing or garbled header after the first member as the end of the archive, it raises
`InvalidArchive`; it refuses extended headers (pax, GNU long names) over `MAX_EXTENDED_HEADER`
bytes before tarfile reads them into memory, chains of more than `MAX_EXTENDED_CHAIN` extended
headers before one member (tarfile reads each with a recursive call: a long chain would end in
`RecursionError`), and sparse files (whose maps tarfile also buffers).
A clean end is one or more zero blocks, which tarfile reports as "no more members".
"""

from __future__ import annotations

import tarfile
from typing import Any

from controller.sync.errors import INVALID_ARCHIVE, SyncError

MAX_EXTENDED_HEADER = 1024 * 1024
MAX_EXTENDED_CHAIN = 16  # extended headers in a row before one member (real tars have 1-2)
_CHAIN = "_torchrun_extended_chain"  # the chain's length so far, kept on the TarFile being read
# b"X": Solaris extended header, read like pax
_EXTENDED = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE, b"X")


class MissingEndError(SyncError):
    """The data stopped where a header should be: empty if nothing came before, else truncated."""

    def __init__(self) -> None:
        super().__init__(INVALID_ARCHIVE, "truncated archive (no end-of-archive marker)")


class StrictTarInfo(tarfile.TarInfo):
    """TarInfo whose header parsing raises `SyncError` instead of guessing."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> StrictTarInfo:
        if len(buf) == 0:
            raise MissingEndError()
        if len(buf) != tarfile.BLOCKSIZE:
            raise SyncError(INVALID_ARCHIVE, "truncated archive (partial header)")
        if buf.count(0) == tarfile.BLOCKSIZE:
            return super().frombuf(buf, encoding, errors)  # raises tarfile's end-of-archive signal
        try:
            return super().frombuf(buf, encoding, errors)
        except tarfile.HeaderError as e:
            raise SyncError(INVALID_ARCHIVE, f"corrupt tar header ({e})") from e

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise SyncError(INVALID_ARCHIVE, f"sparse file {self.name!r} is not supported")
        if self.type not in _EXTENDED:
            return super()._proc_member(tarfile_)  # type: ignore[misc]
        if self.size > MAX_EXTENDED_HEADER:
            raise SyncError(INVALID_ARCHIVE, f"extended header of {self.size} bytes")
        chain = getattr(tarfile_, _CHAIN, 0) + 1
        if chain > MAX_EXTENDED_CHAIN:
            raise SyncError(
                INVALID_ARCHIVE, f"more than {MAX_EXTENDED_CHAIN} extended headers before one member"
            )
        setattr(tarfile_, _CHAIN, chain)
        try:
            return super()._proc_member(tarfile_)  # type: ignore[misc]
        finally:
            setattr(tarfile_, _CHAIN, chain - 1)

    def _proc_gnusparse_00(self, *_: object) -> None:
        raise SyncError(INVALID_ARCHIVE, "sparse files are not supported")

    _proc_gnusparse_01 = _proc_gnusparse_00
    _proc_gnusparse_10 = _proc_gnusparse_00
