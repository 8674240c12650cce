"""publish: a generation appears whole (tree, then marker, then CURRENT) or not at all."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path

import pytest

from controller.sync import layout
from controller.sync.errors import SyncError
from controller.sync.generations import Marker, publish, read_failure, read_marker, record_failure
from controller.sync.layout import CURRENT_LOCK
from controller.sync.limits import Stats


def fill_with(files: dict[str, bytes]):  # type: ignore[no-untyped-def]
    def fill(tmp: Path) -> Stats:
        assert tmp.parent == tmp.parent.parent / "generations"
        assert tmp.name.startswith(".tmp-")
        assert list(tmp.iterdir()) == []
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        return Stats(files=len(files), bytes=sum(map(len, files.values())))

    return fill


def failing(error: BaseException):  # type: ignore[no-untyped-def]
    def fill(tmp: Path) -> Stats:
        (tmp / "partial").write_bytes(b"x")
        raise error

    return fill


def entries(workspace: Path) -> list[str]:
    return sorted(set(os.listdir(workspace / "generations")) - {CURRENT_LOCK})


def test_publish_writes_tree_marker_and_current(tmp_path: Path) -> None:
    marker = publish(tmp_path, 3, fill_with({"a.py": b"abc"}), source="upload", sha256="ab" * 32)

    assert marker == Marker(3, "ab" * 32, 1, 3, "upload")
    assert entries(tmp_path) == ["3"]
    assert (tmp_path / "generations" / "3" / "a.py").read_bytes() == b"abc"
    assert json.loads((tmp_path / "generations" / "3" / ".sync_success").read_text()) == {
        "generation": 3,
        "sha256": "ab" * 32,
        "files": 1,
        "bytes": 3,
        "source": "upload",
    }
    assert (tmp_path / "CURRENT").read_text() == "3\n"
    assert read_marker(tmp_path, 3) == marker
    assert oct(os.stat(tmp_path / "generations" / "3").st_mode & 0o777) == oct(0o755)


def test_current_never_goes_back(tmp_path: Path) -> None:
    publish(tmp_path, 5, fill_with({"a": b""}), source="git")
    publish(tmp_path, 4, fill_with({"a": b""}), source="git")
    assert layout.read_current(tmp_path) == 5
    assert entries(tmp_path) == ["4", "5"]


def test_concurrent_publishers_leave_current_at_the_newest(tmp_path: Path) -> None:
    threads = [
        threading.Thread(target=publish, args=(tmp_path, g, fill_with({"a": b""})), kwargs={"source": "git"})
        for g in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert layout.read_current(tmp_path) == 15
    assert entries(tmp_path) == sorted(str(g) for g in range(16))


def test_failed_fill_leaves_only_the_failure_record(tmp_path: Path) -> None:
    with pytest.raises(SyncError, match="InvalidArchive: bad"):
        publish(tmp_path, 1, failing(SyncError("InvalidArchive", "bad")), source="upload")
    assert entries(tmp_path) == ["1.failed"]
    assert json.loads((tmp_path / "generations" / "1.failed").read_text()) == {
        "reason": "InvalidArchive",
        "message": "bad",
    }
    assert not (tmp_path / "CURRENT").exists()
    failure = read_failure(tmp_path, 1)
    assert failure is not None and (failure.reason, failure.message) == ("InvalidArchive", "bad")


def test_generation_that_cannot_be_marked_is_withdrawn(tmp_path: Path) -> None:
    def fill(tmp: Path) -> Stats:
        (tmp / ".sync_success").mkdir()  # a fill that skipped the checks: the marker cannot be written
        return Stats(files=1, bytes=0)

    with pytest.raises(SyncError, match="WorkspaceError: cannot mark generation 0"):
        publish(tmp_path, 0, fill, source="pvc")
    assert entries(tmp_path) == ["0.failed"]
    assert not (tmp_path / "CURRENT").exists()


def test_full_volume_is_a_workspace_error(tmp_path: Path) -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "x")
    with pytest.raises(SyncError) as refused:
        publish(tmp_path, 1, failing(full), source="pvc")
    assert refused.value.reason == "WorkspaceError"
    assert entries(tmp_path) == ["1.failed"]


def test_a_bug_in_fill_propagates_and_cleans_up(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError):
        publish(tmp_path, 1, failing(ZeroDivisionError()), source="pvc")
    assert entries(tmp_path) == []


@pytest.mark.parametrize("first", ["published", "failed"])
def test_existing_generation_is_never_overwritten(tmp_path: Path, first: str) -> None:
    if first == "published":
        publish(tmp_path, 2, fill_with({"old": b"1"}), source="upload")
    else:
        with pytest.raises(SyncError):
            publish(tmp_path, 2, failing(SyncError("ChecksumMismatch", "x")), source="upload")
    before = {p: p.read_bytes() for p in (tmp_path / "generations").rglob("*") if p.is_file()}

    with pytest.raises(
        SyncError,
        match=f"WorkspaceError: generation 2 already {'exists' if first == 'published' else 'failed'}",
    ):
        publish(tmp_path, 2, fill_with({"new": b"2"}), source="upload")

    after = {p: p.read_bytes() for p in (tmp_path / "generations").rglob("*") if p.is_file()}
    assert after == before


def test_failure_recorded_while_filling_wins(tmp_path: Path) -> None:
    def fill(tmp: Path) -> Stats:
        (tmp / "a").write_bytes(b"x")
        # meanwhile `fetch` gives up waiting and records the timeout
        record_failure(tmp_path, 4, SyncError("UploadTimeout", "no upload"))
        return Stats(files=1, bytes=1)

    with pytest.raises(SyncError, match="WorkspaceError: generation 4 already failed"):
        publish(tmp_path, 4, fill, source="upload")
    assert entries(tmp_path) == ["4.failed"]
    failure = read_failure(tmp_path, 4)
    assert failure is not None and failure.reason == "UploadTimeout"


def test_unreadable_records_read_as_absent_or_failed(tmp_path: Path) -> None:
    (tmp_path / "generations" / "7").mkdir(parents=True)
    (tmp_path / "generations" / "7" / ".sync_success").write_text("{not json")
    (tmp_path / "generations" / "8.failed").write_text("[]")
    (tmp_path / "CURRENT").write_text("seven\n")
    assert read_marker(tmp_path, 7) is None
    failure = read_failure(tmp_path, 8)
    assert failure is not None and failure.reason == "WorkspaceError"
    assert layout.read_current(tmp_path) is None
