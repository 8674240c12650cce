"""check_tree: a tree on disk meets the rules an archive meets."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from controller.sync.errors import SyncError
from controller.sync.limits import Limits, Stats
from controller.sync.tree import check_tree


def make_tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_bytes(b"abc")
    (root / "top.py").write_bytes(b"12345")
    os.symlink("pkg/a.py", root / "link")
    os.symlink("../top.py", root / "pkg" / "up")
    return root


def test_counts_entries_and_bytes(tmp_path: Path) -> None:
    assert check_tree(make_tree(tmp_path / "t")) == Stats(files=5, bytes=8)


@pytest.mark.parametrize(
    ("target", "fragment"), [("/etc/passwd", "absolute"), ("../../x", "leaves"), ("../loop/../x", "leaves")]
)
def test_symlink_leaving_the_tree(tmp_path: Path, target: str, fragment: str) -> None:
    root = make_tree(tmp_path / "t")
    os.symlink(".", root / "loop")
    os.symlink(target, root / "pkg" / "evil")
    with pytest.raises(SyncError, match=fragment):
        check_tree(root)


def test_fifo_and_socket_are_refused(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "t")
    os.mkfifo(root / "pkg" / "pipe")
    with pytest.raises(SyncError, match="fifo"):
        check_tree(root)
    os.unlink(root / "pkg" / "pipe")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(root / "sock"))
        with pytest.raises(SyncError, match="socket"):
            check_tree(root)


def test_reserved_marker(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "t")
    (root / ".sync_success").write_text("{}")
    with pytest.raises(SyncError, match="reserved"):
        check_tree(root)


def test_limits(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "t")
    with pytest.raises(SyncError, match="more than 4 entries") as refused:
        check_tree(root, Limits(max_files=4))
    assert refused.value.reason == "ArchiveTooLarge"
    with pytest.raises(SyncError, match="more than 7 bytes"):
        check_tree(root, Limits(max_bytes=7))
