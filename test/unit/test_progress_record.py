"""The progress-line parser and the file tailer against hostile input: every line and file is
bounded, nothing crashes, and a valid record after garbage is still found."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from controller.progress.record import MAX_LINE_BYTES, MAX_METRICS, MAX_STEP, Record, parse_line, parse_object
from controller.progress.sidecar.tail import MAX_READ_BYTES, Tailer


def test_a_full_line_parses_into_known_fields_and_metrics() -> None:
    line = b'{"step": 1200, "total_steps": 50000, "epoch": 3, "loss": 1.84, "samples_per_second": 812.5}'
    assert parse_line(line) == Record(
        step=1200, total_steps=50000, epoch=3.0, samples_per_second=812.5, metrics={"loss": 1.84}
    )


def test_every_field_is_optional() -> None:
    assert parse_line(b"{}") == Record()
    assert parse_line(b'{"loss": 2}') == Record(metrics={"loss": 2.0})


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"not json",
        b"[1, 2, 3]",
        b'"a string"',
        b"42",
        b"null",
        b'{"step": 1',  # truncated
        b"\xff\xfe{}",  # not UTF-8
        b'{"loss": "\xc3\x28"}',  # invalid UTF-8 inside a string
        b"[" * 100_000 + b"]" * 100_000,  # nesting past the recursion limit (and too long)
        b"[" * 5000 + b"]" * 5000,  # deep nesting within the line limit
    ],
)
def test_what_is_not_a_json_object_is_no_record(line: bytes) -> None:
    assert parse_line(line) is None


def test_a_line_over_the_limit_is_refused_unparsed() -> None:
    pad = "x" * MAX_LINE_BYTES
    assert parse_line(json.dumps({"step": 1, "pad": pad}).encode()) is None
    assert parse_line(b'{"step": 1}' + b" " * (MAX_LINE_BYTES - 11)) == Record(step=1)


@pytest.mark.parametrize(
    "value",
    ["NaN", "Infinity", "-Infinity", "1e400", "-1", "1.5", "true", '"12"', "null", "[1]", "{}"],
)
def test_a_bad_step_loses_only_its_key(value: str) -> None:
    record = parse_line(f'{{"step": {value}, "loss": 0.5}}'.encode())
    assert record == Record(metrics={"loss": 0.5})


def test_an_integer_of_thousands_of_digits_is_no_record() -> None:
    record = parse_line(b'{"step": ' + b"9" * 5000 + b"}")
    assert record is None or record.step is None  # Python 3.11+ refuses to convert it, else out of range


def test_bounds_of_known_fields() -> None:
    assert parse_line(f'{{"step": {MAX_STEP}}}'.encode()) == Record(step=MAX_STEP)
    assert parse_line(f'{{"step": {MAX_STEP + 1}}}'.encode()) == Record()
    assert parse_line(b'{"step": 7.0, "total_steps": 0, "rank": 70000}') == Record(step=7)
    assert parse_line(b'{"epoch": -1, "samples_per_second": NaN}') == Record()


def test_ten_thousand_keys_keep_the_first_metrics_only() -> None:
    # within the line limit: short keys
    fields = {f"m{i}": i for i in range(10_000)}
    line = json.dumps(fields, separators=(",", ":")).encode()
    if len(line) > MAX_LINE_BYTES:  # the line limit refuses it whole: also bounded
        assert parse_line(line) is None
    record = parse_object(fields)  # what a report body of 10,000 keys would give the controller
    assert record is not None
    assert len(record.metrics) == MAX_METRICS
    assert list(record.metrics) == [f"m{i}" for i in range(MAX_METRICS)]


@pytest.mark.parametrize("name", ["", "1abc", "a b", "a\nb", "x" * 64, "ä", "a{b}", 'a"b', "a=b"])
def test_metric_names_are_validated(name: str) -> None:
    assert parse_object({name: 1.0, "ok_name": 2}) == Record(metrics={"ok_name": 2.0})


def test_metric_values_are_finite_numbers_only() -> None:
    line = b'{"a": NaN, "b": Infinity, "c": true, "d": "1", "e": [1], "f": null, "g": -3.5, "h": 1e308}'
    assert parse_line(line) == Record(metrics={"g": -3.5, "h": 1e308})


def test_a_record_round_trips_through_its_json() -> None:
    record = Record(step=3, total_steps=10, epoch=0.5, samples_per_second=2.0, rank=1, metrics={"loss": 1.0})
    assert parse_object(record.to_json()) == record


# -- the tailer ----------------------------------------------------------------------------


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_the_tailer_returns_the_latest_valid_record_of_what_was_appended(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    tail = Tailer(str(path))
    assert tail.poll() is None  # no file yet: no record, no error
    append(path, b'{"step": 1}\n{"step": 2}\ngarbage\n')
    assert tail.poll() == Record(step=2)
    assert tail.poll() is None  # nothing new
    append(path, b'{"step": 3')  # a partial line waits for its newline
    assert tail.poll() is None
    append(path, b', "loss": 1}\n')
    assert tail.poll() == Record(step=3, metrics={"loss": 1.0})


def test_an_overlong_line_is_skipped_to_its_newline_without_being_kept(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    tail = Tailer(str(path))
    append(path, b'{"step": 1, "pad": "' + b"x" * (3 * MAX_LINE_BYTES))
    assert tail.poll() is None
    assert len(tail._partial) <= MAX_LINE_BYTES  # bounded while the line goes on
    append(path, b"x" * MAX_LINE_BYTES)
    assert tail.poll() is None
    assert len(tail._partial) <= MAX_LINE_BYTES
    append(path, b'"}\n{"step": 5}\n')
    assert tail.poll() == Record(step=5)


def test_a_huge_append_is_read_in_bounded_polls(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    lines = b"".join(b'{"step": %d}\n' % i for i in range(200_000))
    assert len(lines) > 2 * MAX_READ_BYTES
    path.write_bytes(lines)
    tail = Tailer(str(path))
    seen = []
    while (record := tail.poll()) is not None:
        seen.append(record.step)
    assert len(seen) >= 2 and seen[-1] == 199_999
    assert seen == sorted(seen)


def test_a_truncated_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    tail = Tailer(str(path))
    path.write_bytes(b'{"step": 100}\n' * 10)
    assert tail.poll() == Record(step=100)
    path.write_bytes(b'{"step": 1}\n')  # truncated (shorter than what was read), then written
    assert tail.poll() == Record(step=1)


def test_a_replaced_file_is_followed_by_name(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    tail = Tailer(str(path))
    path.write_bytes(b'{"step": 1}\n')
    assert tail.poll() == Record(step=1)
    new = tmp_path / "new.jsonl"
    new.write_bytes(b'{"step": 2}\n' * 5 + b'{"step": 9}\n')  # longer than the old file
    os.replace(new, path)
    assert tail.poll() == Record(step=9)
    path.unlink()
    assert tail.poll() is None  # gone: no record, no error
    path.write_bytes(b'{"step": 10}\n')
    assert tail.poll() == Record(step=10)


def test_an_unreadable_path_is_no_record(tmp_path: Path) -> None:
    tail = Tailer(str(tmp_path))  # a directory: open works, reading fails
    assert tail.poll() is None
    assert Tailer(str(tmp_path / "missing" / "x")).poll() is None
