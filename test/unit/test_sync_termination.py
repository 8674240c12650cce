"""The termination message: written within 4 KiB, parsed without ever raising."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.sync.errors import SyncError
from controller.sync.generations import Marker
from controller.sync.termination import (
    MAX_BYTES,
    SyncResult,
    parse_termination_message,
    write_termination_message,
)


def test_synced_round_trip(tmp_path: Path) -> None:
    result = SyncResult.synced(Marker(4, "cd" * 32, 10, 2048, "upload"))
    write_termination_message(tmp_path / "log", result)
    assert json.loads((tmp_path / "log").read_text()) == {
        "result": "Synced",
        "generation": 4,
        "sha256": "cd" * 32,
        "files": 10,
        "bytes": 2048,
        "source": "upload",
    }
    parsed = parse_termination_message((tmp_path / "log").read_text())
    assert parsed == result and parsed.succeeded


def test_failed_round_trip_with_a_huge_message(tmp_path: Path) -> None:
    result = SyncResult.failed(2, SyncError("InvalidArchive", "é" * 100_000))
    write_termination_message(tmp_path / "log", result)
    text = (tmp_path / "log").read_text()
    assert len(text.encode()) <= MAX_BYTES + 1  # and a newline
    parsed = parse_termination_message(text)
    assert (parsed.result, parsed.generation, parsed.reason) == ("Failed", 2, "InvalidArchive")
    assert parsed.message is not None and parsed.message.startswith("ééé") and not parsed.succeeded


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "   ",
        "garbage",
        "{",
        "[1, 2]",
        '"Synced"',
        '{"result": "Synced"}',
        '{"result": "Synced", "generation": "3"}',
        '{"result": "Maybe", "generation": 3}',
        '{"result": "Synced", "generation": true}',
        "\x00\xff" * 10,
        '{"result": "Synced", "generation": 3' + " " * 5000,
    ],
)
def test_garbage_reads_as_sync_failed(text: str | None) -> None:
    parsed = parse_termination_message(text)
    assert (parsed.result, parsed.reason, parsed.succeeded) == ("Failed", "SyncFailed", False)
    assert parsed.message and "\n" not in parsed.message and len(parsed.message) < 300


def test_failed_with_odd_fields_keeps_what_is_usable() -> None:
    parsed = parse_termination_message(
        '{"result": "Failed", "generation": 1, "reason": "not a word!", "message": 3}'
    )
    assert (parsed.generation, parsed.reason) == (1, "SyncFailed")
    assert parsed.message == "the sync failed without a message"
