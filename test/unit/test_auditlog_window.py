"""The benchmarks' audit-log window (hack/bench/auditlog.py, loaded by its path: the benchmarks are
not a package) keeps every event of its namespace across kube-apiserver's log rotation, and none
logged before it opened."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import ModuleType

import pytest
from bench_modules import load


@pytest.fixture(scope="module")
def auditlog() -> ModuleType:
    return load("auditlog")


def line(ns: str, name: str) -> str:
    event = {
        "stage": "ResponseComplete",
        "verb": "create",
        "objectRef": {"namespace": ns, "name": name, "resource": "pods"},
        "userAgent": "x/1",
    }
    return json.dumps(event, separators=(",", ":")) + "\n"


def test_a_window_reads_on_across_a_rotation_and_never_before_it_opened(
    auditlog: ModuleType, tmp_path: Path
) -> None:
    log = tmp_path / "audit.log"
    old = tmp_path / "audit-2026-11-25T10-00-00.000.log"  # a backup from before the window
    old.write_text(line("ns", "ancient"))
    past = time.time() - 3600
    os.utime(old, (past, past))
    log.write_text(line("ns", "before") + line("other", "x"))
    window = auditlog.Window(tmp_path, "ns")
    with log.open("a") as f:
        f.write(line("ns", "a") + line("other", "y"))
    # lumberjack's rotation: the file is renamed (same inode), a new one begun
    log.rename(tmp_path / "audit-2026-11-25T11-00-00.000.log")
    log.write_text(line("ns", "b") + line("ns", "c"))
    names = [e["objectRef"]["name"] for e in window.writes()]
    assert names == ["a", "b", "c"]


def test_a_window_opened_before_the_log_exists_reads_it_whole(auditlog: ModuleType, tmp_path: Path) -> None:
    window = auditlog.Window(tmp_path, "ns")
    (tmp_path / "audit.log").write_text(line("ns", "first"))
    assert [e["objectRef"]["name"] for e in window.writes()] == ["first"]
