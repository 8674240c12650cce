"""The read-ahead thread: same bytes in the same order, errors raised where they would have been."""

from __future__ import annotations

import io
import threading
import time

import pytest

from controller.sync.errors import SyncError
from controller.sync.prefetch import CHUNK, DEPTH, Prefetcher


def read_all(reader: Prefetcher, size: int) -> bytes:
    out = bytearray()
    while chunk := reader.read(size):
        out += chunk
    return bytes(out)


@pytest.mark.parametrize("size", [1, 512, CHUNK, 10 * CHUNK, -1])
def test_same_bytes_in_order(size: int) -> None:
    data = bytes(range(256)) * 5000
    reader = Prefetcher(io.BytesIO(data))
    assert read_all(reader, size) == data
    assert reader.read(10) == b""
    reader.close()


class Failing:
    def __init__(self) -> None:
        self.calls = 0

    def read(self, size: int, /) -> bytes:
        self.calls += 1
        if self.calls > 2:
            raise SyncError("InvalidArchive", "bad data")
        return b"x" * size


def test_error_comes_after_the_good_bytes_in_the_callers_thread() -> None:
    reader = Prefetcher(Failing())
    assert len(reader.read(-1)) + len(reader.read(-1)) == 2 * CHUNK
    with pytest.raises(SyncError, match="bad data"):
        reader.read(-1)
    reader.close()


class Endless:
    def __init__(self) -> None:
        self.bytes = 0
        self.threads: set[str] = set()

    def read(self, size: int, /) -> bytes:
        self.threads.add(threading.current_thread().name)
        self.bytes += size
        return b"y" * size


def test_read_ahead_is_bounded_and_close_stops_the_thread() -> None:
    source = Endless()
    reader = Prefetcher(source)
    reader.read(1)
    time.sleep(0.3)  # time enough to run far ahead, were it unbounded
    assert source.bytes <= (DEPTH + 2) * CHUNK
    reader.close()
    after_close = source.bytes
    time.sleep(0.3)
    assert source.bytes == after_close
    assert source.threads == {"sync-prefetch"}
