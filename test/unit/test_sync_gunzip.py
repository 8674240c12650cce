"""Streaming gunzip: CRC and truncation checked, memory bounded whatever the ratio."""

from __future__ import annotations

import gzip
import io
import tracemalloc

import pytest

from controller.sync.errors import SyncError
from controller.sync.gunzip import GunzipReader


def read_all(reader: GunzipReader, size: int = 65536) -> bytes:
    out = bytearray()
    while chunk := reader.read(size):
        out += chunk
    return bytes(out)


def test_round_trip_and_concatenated_members() -> None:
    data = gzip.compress(b"hello ") + gzip.compress(b"world")
    assert read_all(GunzipReader(io.BytesIO(data)), 3) == b"hello world"


def test_bad_crc_is_refused() -> None:
    data = bytearray(gzip.compress(b"payload" * 100))
    data[-8] ^= 0xFF  # first CRC byte of the trailer
    with pytest.raises(SyncError, match="corrupt gzip data"):
        read_all(GunzipReader(io.BytesIO(bytes(data))))


@pytest.mark.parametrize("cut", [1, 4, 8, 20])
def test_truncated_stream_is_refused(cut: int) -> None:
    data = gzip.compress(b"payload" * 1000)[:-cut]
    with pytest.raises(SyncError, match="truncated gzip data"):
        read_all(GunzipReader(io.BytesIO(data)))


def test_no_data_at_all() -> None:
    with pytest.raises(SyncError, match="empty archive"):
        GunzipReader(io.BytesIO(b"")).read(10)


def test_memory_does_not_follow_the_compression_ratio() -> None:
    bomb = gzip.compress(bytes(256 * 1024 * 1024), compresslevel=9)  # ~250 KB -> 256 MiB
    reader = GunzipReader(io.BytesIO(bomb))
    tracemalloc.start()
    try:
        total = 0
        while chunk := reader.read(65536):
            total += len(chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == 256 * 1024 * 1024
    assert peak < 8 * 1024 * 1024
