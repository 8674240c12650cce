"""Receiving an upload: exactly N bytes from a file descriptor, hashed and extracted as they arrive.

`ExactReader` never reads past the declared size and never waits for end-of-file (exec may never
deliver it): after N bytes it reports the end itself. Input that ends before N bytes is
`UploadIncomplete`; no byte for `idle_timeout` seconds is `UploadTimeout`.

`receive` publishes the generation only when the archive passed every check and the SHA-256 of
the N bytes matches. When a check fails it still reads (and hashes, without extracting) the rest,
so that a transport fault is reported as such: a short upload as `UploadIncomplete`, bytes that
are not the ones sent as `ChecksumMismatch`, ahead of whatever they broke in the archive. A
SIGTERM, SIGHUP or SIGINT while receiving is an `UploadIncomplete` too, cleaned up and recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from controller.sync.archive import extract_archive
from controller.sync.errors import CHECKSUM_MISMATCH, UPLOAD_INCOMPLETE, UPLOAD_TIMEOUT, SyncError
from controller.sync.generations import Marker, publish
from controller.sync.limits import Limits, Stats

READ_CHUNK = 1024 * 1024
DEFAULT_IDLE_TIMEOUT = 120.0
POLL_SLICE = 0.25
_INTERRUPTS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class ExactReader:
    """Reads exactly `size` bytes from `fd` (then b""), hashing them; see the module docstring.

    `cancelled`, once set, ends a wait for input within `POLL_SLICE` seconds (`UploadIncomplete`),
    so a thread reading ahead can be stopped while the sender is silent.
    """

    def __init__(
        self,
        fd: int,
        size: int,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        cancelled: threading.Event | None = None,
    ) -> None:
        self.fd = fd
        self.size = size
        self.idle_timeout = idle_timeout
        self.cancelled = cancelled or threading.Event()
        self.received = 0
        self.digest = hashlib.sha256()
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def read(self, n: int = -1, /) -> bytes:
        remaining = self.size - self.received
        if remaining <= 0:
            return b""
        self._wait_for_input()
        chunk = os.read(self.fd, min(remaining, n if n > 0 else READ_CHUNK))
        if not chunk:
            raise SyncError(UPLOAD_INCOMPLETE, f"input ended after {self.received} of {self.size} bytes")
        self.digest.update(chunk)
        self.received += len(chunk)
        return chunk

    def _wait_for_input(self) -> None:
        deadline = time.monotonic() + self.idle_timeout
        while not self._poll.poll(POLL_SLICE * 1000):
            if self.cancelled.is_set():
                raise SyncError(UPLOAD_INCOMPLETE, f"cancelled after {self.received} of {self.size} bytes")
            if time.monotonic() >= deadline:
                raise SyncError(
                    UPLOAD_TIMEOUT,
                    f"no data for {self.idle_timeout:g} s after {self.received} of {self.size} bytes",
                )

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
        with interrupts_end_the_upload(reader.cancelled):
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


@contextlib.contextmanager
def interrupts_end_the_upload(cancelled: threading.Event) -> Iterator[None]:
    """While inside: SIGTERM, SIGHUP or SIGINT (the exec stream torn down, the pod stopping) end
    the upload as `UploadIncomplete`, so `publish` removes the temp dir and records the failure."""

    def interrupted(signum: int, _frame: object) -> None:
        cancelled.set()  # stops the read-ahead thread's wait for input
        raise SyncError(UPLOAD_INCOMPLETE, f"receive interrupted by {signal.Signals(signum).name}")

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals
        return
    previous = {sig: signal.signal(sig, interrupted) for sig in _INTERRUPTS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
