"""Receiving an upload: exactly N bytes from a file descriptor, hashed and extracted as they arrive.

`ExactReader` never reads past the declared size and never waits for end-of-file (exec may never
deliver it): after N bytes it reports the end itself. Input that ends before N bytes is
`UploadIncomplete`; no byte for `idle_timeout` seconds is `UploadTimeout`.

`receive` publishes the generation only when the archive passed every check and the SHA-256 of
the N bytes matches. When a check fails it still reads (and hashes, without extracting) the rest,
so that a transport fault is reported as such: a short upload as `UploadIncomplete`, bytes that
are not the ones sent as `ChecksumMismatch`, ahead of whatever they broke in the archive.
"""

from __future__ import annotations

import hashlib
import os
import select
from pathlib import Path

from controller.sync.archive import extract_archive
from controller.sync.errors import CHECKSUM_MISMATCH, UPLOAD_INCOMPLETE, UPLOAD_TIMEOUT, SyncError
from controller.sync.generations import Marker, publish
from controller.sync.limits import Limits, Stats

READ_CHUNK = 1024 * 1024
DEFAULT_IDLE_TIMEOUT = 120.0


class ExactReader:
    """Reads exactly `size` bytes from `fd` (then b""), hashing them; see the module docstring."""

    def __init__(self, fd: int, size: int, idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> None:
        self.fd = fd
        self.size = size
        self.idle_timeout = idle_timeout
        self.received = 0
        self.digest = hashlib.sha256()
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def read(self, n: int = -1, /) -> bytes:
        remaining = self.size - self.received
        if remaining <= 0:
            return b""
        want = min(remaining, n if n > 0 else READ_CHUNK)
        if not self._poll.poll(self.idle_timeout * 1000):
            raise SyncError(
                UPLOAD_TIMEOUT,
                f"no data for {self.idle_timeout:g} s after {self.received} of {self.size} bytes",
            )
        chunk = os.read(self.fd, want)
        if not chunk:
            raise SyncError(UPLOAD_INCOMPLETE, f"input ended after {self.received} of {self.size} bytes")
        self.digest.update(chunk)
        self.received += len(chunk)
        return chunk

    def drain(self) -> None:
        """Read (and hash) whatever is left of the declared size."""
        while self.read(READ_CHUNK):
            pass


def receive(
    workspace: Path,
    generation: int,
    *,
    size: int,
    sha256: str,
    limits: Limits,
    fd: int = 0,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> Marker:
    """Read the upload from `fd` and publish it as `generation`; raises SyncError (recorded)."""
    expected = sha256.lower()

    def fill(tmp: Path) -> Stats:
        reader = ExactReader(fd, size, idle_timeout)
        try:
            stats = extract_archive(reader, tmp, limits)
        except SyncError as e:
            if e.reason in (UPLOAD_INCOMPLETE, UPLOAD_TIMEOUT):
                raise
            raise _transport_fault(reader, expected) or e from None
        reader.drain()  # extraction reads to the end already; this only makes it explicit
        _check_digest(reader, expected)
        return stats

    return publish(workspace, generation, fill, source="upload", sha256=expected)


def _transport_fault(reader: ExactReader, expected: str) -> SyncError | None:
    """After a failed check: the upload's own fault (short, stalled, altered bytes), if any."""
    try:
        reader.drain()
        _check_digest(reader, expected)
    except SyncError as fault:
        return fault
    return None


def _check_digest(reader: ExactReader, expected: str) -> None:
    actual = reader.digest.hexdigest()
    if actual != expected:
        raise SyncError(
            CHECKSUM_MISMATCH, f"SHA-256 of the {reader.size} bytes is {actual}, expected {expected}"
        )
