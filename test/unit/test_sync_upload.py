"""receive: exactly N bytes, never waiting for EOF, with the transport's faults named first."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sync_archives import HOSTILE, good_archive

from controller.sync.errors import SyncError
from controller.sync.limits import Limits
from controller.sync.upload import ExactReader, receive


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def feed(fd: int, data: bytes, close: bool) -> threading.Thread:
    def run() -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if close:
            os.close(fd)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_reads_exactly_n_bytes_and_no_more(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"0123456789")
    reader = ExactReader(r, 6, idle_timeout=5)
    got = reader.read(4) + reader.read(100) + reader.read(100)
    assert got == b"012345"
    assert reader.digest.hexdigest() == hashlib.sha256(b"012345").hexdigest()
    assert os.read(r, 100) == b"6789"  # the rest is still in the pipe


def test_idle_timeout(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"abc")
    reader = ExactReader(r, 10, idle_timeout=0.2)
    assert reader.read(10) == b"abc"
    started = time.monotonic()
    with pytest.raises(SyncError, match=r"UploadTimeout: no data for 0\.2 s after 3 of 10 bytes"):
        reader.read(10)
    assert time.monotonic() - started < 2


def test_cancel_ends_a_wait_for_input(pipe: tuple[int, int]) -> None:
    r, _ = pipe
    reader = ExactReader(r, 10, idle_timeout=60)
    threading.Timer(0.2, reader.cancelled.set).start()
    started = time.monotonic()
    with pytest.raises(SyncError, match="UploadIncomplete: cancelled after 0 of 10 bytes"):
        reader.read(10)
    assert time.monotonic() - started < 2


def test_input_ending_early(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"abc")
    os.close(w)
    reader = ExactReader(r, 10, idle_timeout=5)
    reader.read(10)
    with pytest.raises(SyncError, match="UploadIncomplete: input ended after 3 of 10 bytes"):
        reader.read(10)


def test_receive_with_stdin_left_open(tmp_path: Path, pipe: tuple[int, int]) -> None:
    r, w = pipe
    data = good_archive()
    feed(w, data, close=False)
    marker = receive(
        tmp_path,
        0,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        limits=Limits(),
        fd=r,
        idle_timeout=5,
    )
    assert (marker.generation, marker.sha256) == (0, hashlib.sha256(data).hexdigest())


def test_altered_bytes_are_a_checksum_mismatch(tmp_path: Path, pipe: tuple[int, int]) -> None:
    r, w = pipe
    sent = good_archive()
    received = bytearray(sent)
    received[len(received) // 2] ^= 0x55  # corrupted in transit: the archive breaks too
    feed(w, bytes(received), close=True)
    with pytest.raises(SyncError, match="ChecksumMismatch"):
        receive(tmp_path, 0, size=len(sent), sha256=hashlib.sha256(sent).hexdigest(), limits=Limits(), fd=r)
    assert sorted(os.listdir(tmp_path / "generations")) == ["0.failed"]


def test_short_upload_of_a_broken_archive_is_incomplete(tmp_path: Path, pipe: tuple[int, int]) -> None:
    r, w = pipe
    data = HOSTILE["traversal"][0]
    feed(w, data, close=True)
    with pytest.raises(SyncError, match="UploadIncomplete"):
        receive(tmp_path, 0, size=len(data) + 10, sha256="0" * 64, limits=Limits(), fd=r)


def test_refused_archive_with_right_checksum_keeps_its_reason(tmp_path: Path, pipe: tuple[int, int]) -> None:
    r, w = pipe
    data = HOSTILE["char-device"][0]
    feed(w, data, close=False)
    with pytest.raises(SyncError, match="InvalidArchive: device file"):
        receive(tmp_path, 0, size=len(data), sha256=hashlib.sha256(data).hexdigest(), limits=Limits(), fd=r)
