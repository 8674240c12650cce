"""copy: waits for a marked generation ≥ the minimum, copies its tree without the marker."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from controller.sync.copy import copy_tree, wait_for_generation
from controller.sync.errors import SyncError
from controller.sync.generations import publish
from controller.sync.limits import Stats


def fill(tmp: Path) -> Stats:
    (tmp / "pkg").mkdir()
    (tmp / "pkg" / "a.py").write_bytes(b"a")
    (tmp / "run.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(tmp / "run.sh", 0o755)
    os.symlink("pkg/a.py", tmp / "link")
    return Stats(files=4, bytes=11)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_waits_for_a_marked_generation_at_least_the_minimum(tmp_path: Path) -> None:
    publish(tmp_path, 0, fill, source="upload")
    clock = FakeClock()
    calls = []

    def sleep(seconds: float) -> None:
        calls.append(seconds)
        clock.sleep(seconds)
        if len(calls) == 3:
            publish(tmp_path, 1, fill, source="upload")

    marker = wait_for_generation(tmp_path, 1, 60, clock=clock, sleep=sleep)
    assert marker.generation == 1 and len(calls) == 3


def test_current_without_marker_is_not_trusted(tmp_path: Path) -> None:
    (tmp_path / "generations" / "2").mkdir(parents=True)
    (tmp_path / "CURRENT").write_text("2\n")
    clock = FakeClock()
    with pytest.raises(SyncError, match="WorkspaceError: no generation >= 2 published within 5 s"):
        wait_for_generation(tmp_path, 2, 5, clock=clock, sleep=clock.sleep)
    assert clock.now >= 5


def test_copy_keeps_modes_and_links_and_replaces_leftovers(tmp_path: Path) -> None:
    publish(tmp_path, 0, fill, source="upload")
    target = tmp_path / "app"
    (target / "run.sh").mkdir(parents=True)  # leftovers of an interrupted copy
    (target / "pkg").write_text("not a dir")

    for _ in range(2):
        copy_tree(tmp_path / "generations" / "0", target)

    assert sorted(os.listdir(target)) == ["link", "pkg", "run.sh"]
    assert stat.S_IMODE((target / "run.sh").stat().st_mode) == 0o755
    assert os.readlink(target / "link") == "pkg/a.py"
    assert (target / "link").read_bytes() == b"a"
