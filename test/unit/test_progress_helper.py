"""The helper the training program imports (`controller/tools/python/torchrun_progress.py`): its
lines are what the reporter's parser reads back; rank 0 only by default; never raises."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from controller.progress.record import Record, parse_line

HELPER = Path(__file__).resolve().parents[2] / "controller" / "tools" / "python" / "torchrun_progress.py"


@pytest.fixture
def helper(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("torchrun_progress", HELPER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("TORCHRUN_PROGRESS_FILE", str(tmp_path / "progress.jsonl"))
    monkeypatch.setenv("RANK", "0")
    return module


def lines(tmp_path: Path) -> list[Record | None]:
    return [parse_line(line) for line in (tmp_path / "progress.jsonl").read_bytes().splitlines()]


class Scalar:
    """A 0-d tensor's stand-in: converts with float()."""

    def __float__(self) -> float:
        return 0.5


def test_reports_parse_back_into_records(helper: ModuleType, tmp_path: Path) -> None:
    assert helper.report(step=3, total_steps=10, loss=Scalar(), epoch=0.5, lr=float("nan"), note="x") is True
    helper.flush()
    assert lines(tmp_path) == [Record(step=3, total_steps=10, epoch=0.5, rank=0, metrics={"loss": 0.5})]


def test_only_rank_0_unless_asked(
    helper: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "3")
    assert helper.report(step=1) is False
    assert helper.report(step=1, all_ranks=True) is True
    helper.flush()
    assert lines(tmp_path) == [Record(step=1, rank=3)]


def test_without_the_file_or_with_a_bad_one_nothing_raises(
    helper: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TORCHRUN_PROGRESS_FILE")
    assert helper.report(step=1) is False
    monkeypatch.setenv("TORCHRUN_PROGRESS_FILE", str(tmp_path / "missing" / "dir" / "p"))
    assert helper.report(step=1) is True and helper.flush() is False  # taken, but it cannot be written
    monkeypatch.setenv("TORCHRUN_PROGRESS_FILE", str(tmp_path / "p"))
    assert helper.report(**{f"m{i}": float(i) for i in range(5000)}) is False  # over the line limit


class Lazy:
    """A tensor's stand-in that counts its conversions (each is a device wait for a CUDA one)."""

    def __init__(self, value: float) -> None:
        self.value, self.converted = value, 0

    def __float__(self) -> float:
        self.converted += 1
        return self.value


def test_reporting_every_step_converts_nothing_in_the_loop_and_writes_at_most_once_per_interval(
    helper: ModuleType, tmp_path: Path
) -> None:
    """A thousand reports in a tight loop: `report` converts no value (the loop never waits for a
    device), the writer thread writes a line now and then with the newest values, and the last
    step is in the file after `flush` (what exit does)."""
    values = [Lazy(float(i)) for i in range(1000)]
    for step, loss in enumerate(values, start=1):
        helper.report(step=step, loss=loss)
    converted_in_loop = sum(v.converted for v in values)
    helper.flush()
    written = lines(tmp_path)
    assert converted_in_loop <= 2  # at most what the writer thread took meanwhile, never one per step
    assert 1 <= len(written) <= 3 and written[-1] == Record(step=1000, rank=0, metrics={"loss": 999.0})
    steps = [r.step for r in written if r is not None]
    assert steps == sorted(steps)  # the lines land in the order the values were taken
