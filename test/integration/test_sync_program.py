"""The sync program as a real process (`python -m controller.sync`) on real archives.

No Kubernetes: a temp directory stands for the workspace PVC and the environment variables of
docs/workspace.md point the program at it. What is checked is what is left on disk, the exit
code, the one stderr line and the termination message.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from sync_archives import HOSTILE, SMALL_MAX_BYTES, SMALL_MAX_FILES, good_archive
from testbed import REPO

from controller.sync.layout import CURRENT_LOCK
from controller.sync.termination import parse_termination_message


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.termination_log = root.parent / "termination-log"
        self.env = {
            **os.environ,
            "TORCHRUN_WORKSPACE": str(root),
            "TORCHRUN_TERMINATION_LOG": str(self.termination_log),
            "PYTHONPATH": str(REPO),
        }

    def start(self, *args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "controller.sync", *args],
            env=self.env,
            cwd=REPO,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def run(self, *args: str, data: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "controller.sync", *args],
            env=self.env,
            cwd=REPO,
            input=data,
            capture_output=True,
            check=False,
            timeout=timeout,
        )

    def receive(
        self, generation: int, data: bytes, *extra: str, **kw: object
    ) -> subprocess.CompletedProcess[bytes]:
        size = kw.get("size", len(data))
        sha = kw.get("sha256", hashlib.sha256(data).hexdigest())
        args = ["receive", "--generation", str(generation), "--size", str(size), "--sha256", str(sha)]
        return self.run(*args, *extra, data=data)

    def generations(self, missing_ok: bool = False) -> list[str]:
        if missing_ok and not (self.root / "generations").exists():
            return []
        return sorted(set(os.listdir(self.root / "generations")) - {CURRENT_LOCK})


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "workspace")


def test_good_archive_is_published_with_marker_and_current(ws: Workspace) -> None:
    data = good_archive()
    done = ws.receive(0, data)

    assert done.returncode == 0, done.stderr
    marker = json.loads(done.stdout)
    # what the archive holds, read back from its bytes: every entry (files, dirs, links) and the
    # data of its regular files (a hardlink's is its target's, not counted twice)
    with tarfile.open(fileobj=io.BytesIO(data)) as sent:
        entries = sent.getmembers()
    assert marker == {
        "generation": 0,
        "sha256": hashlib.sha256(data).hexdigest(),
        "files": len(entries),
        "bytes": sum(e.size for e in entries if e.isreg()),
        "source": "upload",
    }
    assert json.loads((ws.root / "generations" / "0" / ".sync_success").read_text()) == marker
    assert (ws.root / "CURRENT").read_text() == "0\n"
    assert ws.generations() == ["0"]
    tree = ws.root / "generations" / "0"
    assert sorted(os.listdir(tree)) == [".sync_success", "latest.py", "pkg", "run.sh"]
    assert os.stat(tree / "run.sh").st_mode & 0o7777 == 0o755


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_or_broken_archive_is_refused_and_leaves_nothing(ws: Workspace, case: str) -> None:
    data, reason, fragment = HOSTILE[case]
    limits = ["--max-bytes", str(SMALL_MAX_BYTES), "--max-files", str(SMALL_MAX_FILES)]
    done = ws.receive(1, data, *limits)
    assert_refused(ws, done, 1, reason, fragment)


def assert_refused(
    ws: Workspace, done: subprocess.CompletedProcess[bytes], g: int, reason: str, fragment: str
) -> None:
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 1, done
    assert len(lines) == 1 and lines[0].startswith(f"{reason}: ") and fragment in lines[0], lines
    assert done.stdout == b""
    assert ws.generations() == [f"{g}.failed"]  # no generation dir, no temp dir
    assert json.loads((ws.root / "generations" / f"{g}.failed").read_text())["reason"] == reason
    assert not (ws.root / "CURRENT").exists()


def test_wrong_checksum(ws: Workspace) -> None:
    done = ws.receive(1, good_archive(), sha256="0" * 64)
    assert_refused(ws, done, 1, "ChecksumMismatch", "expected 0000")


def test_short_upload_stdin_closed_early(ws: Workspace) -> None:
    data = good_archive()
    done = ws.receive(1, data[:100], size=len(data), sha256=hashlib.sha256(data).hexdigest())
    assert_refused(ws, done, 1, "UploadIncomplete", f"input ended after 100 of {len(data)} bytes")


def test_receive_finishes_while_stdin_stays_open(ws: Workspace) -> None:
    """Like kwok's exec, which never sends EOF: the declared size is the end."""
    data = good_archive()
    sha = hashlib.sha256(data).hexdigest()
    proc = ws.start(
        "receive", "--generation", "0", "--size", str(len(data)), "--sha256", sha, stdin=subprocess.PIPE
    )
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.flush()  # and never closed
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert proc.stdout is not None
    assert json.loads(proc.stdout.read())["sha256"] == sha
    proc.stdin.close()
    assert ws.generations() == ["0"]


def test_upload_that_stalls_times_out(ws: Workspace) -> None:
    data = good_archive()
    sha = hashlib.sha256(data).hexdigest()
    args = ["receive", "--generation", "2", "--size", str(len(data)), "--sha256", sha, "--idle-timeout", "1"]
    proc = ws.start(*args, stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(data[:100])
    proc.stdin.flush()
    started = time.monotonic()
    try:
        assert proc.wait(timeout=30) == 1  # stdin still open: the idle timeout, not EOF, ends it
    finally:
        proc.kill()
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stdin.close()
    assert err.decode().strip() == f"UploadTimeout: no data for 1 s after 100 of {len(data)} bytes"
    assert time.monotonic() - started < 10
    assert ws.generations() == ["2.failed"]


def test_interrupted_receive_cleans_up_and_records(ws: Workspace) -> None:
    data = good_archive()
    sha = hashlib.sha256(data).hexdigest()
    proc = ws.start(
        "receive", "--generation", "2", "--size", str(len(data)), "--sha256", sha, stdin=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(data[:100])
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    while not any(n.startswith(".tmp-2-") for n in ws.generations(missing_ok=True)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 1
    finally:
        proc.kill()
    assert proc.stderr.read().decode().strip() == "UploadIncomplete: receive interrupted by SIGTERM"
    proc.stdin.close()
    assert ws.generations() == ["2.failed"]


def test_fetch_upload_reports_what_receive_published(ws: Workspace) -> None:
    fetch = ws.start("fetch", "--source", "upload", "--generation", "0", "--timeout", "60")
    time.sleep(1)
    assert fetch.poll() is None  # waiting for the upload
    data = good_archive()
    assert ws.receive(0, data).returncode == 0

    out, err = fetch.communicate(timeout=30)
    assert fetch.returncode == 0, err
    result = parse_termination_message(ws.termination_log.read_text())
    assert (result.result, result.generation, result.sha256, result.files, result.source) == (
        "Synced",
        0,
        hashlib.sha256(data).hexdigest(),
        6,
        "upload",
    )
    assert out.decode().startswith("Synced generation 0 from upload")


def test_fetch_upload_reports_a_refused_upload(ws: Workspace) -> None:
    fetch = ws.start("fetch", "--source", "upload", "--generation", "3", "--timeout", "60")
    data, _, _ = HOSTILE["traversal"]
    assert ws.receive(3, data).returncode == 1

    _, err = fetch.communicate(timeout=30)
    assert fetch.returncode == 1
    assert err.decode().startswith("InvalidArchive: path traversal")
    result = parse_termination_message(ws.termination_log.read_text())
    assert (result.result, result.generation, result.reason) == ("Failed", 3, "InvalidArchive")


def test_fetch_upload_times_out_and_a_late_upload_is_refused(ws: Workspace) -> None:
    done = ws.run("fetch", "--source", "upload", "--generation", "1", "--timeout", "1")
    assert done.returncode == 1
    assert done.stderr.decode().startswith("UploadTimeout: no upload for generation 1 within 1 s")
    result = parse_termination_message(ws.termination_log.read_text())
    assert (result.result, result.reason) == ("Failed", "UploadTimeout")
    assert ws.generations() == ["1.failed"]

    late = ws.receive(1, good_archive())
    assert late.returncode == 1 and late.stderr.startswith(b"WorkspaceError: generation 1 already failed")
    assert ws.generations() == ["1.failed"]


def test_copy_waits_for_current_and_copies_without_the_marker(ws: Workspace, tmp_path: Path) -> None:
    target = tmp_path / "app"
    copy = ws.start("copy", "--min-generation", "1", "--target", str(target), "--timeout", "60")
    assert ws.receive(0, good_archive()).returncode == 0
    time.sleep(1.5)
    assert copy.poll() is None  # generation 0 is older than asked for
    assert ws.receive(1, good_archive()).returncode == 0

    out, err = copy.communicate(timeout=30)
    assert copy.returncode == 0, err
    assert out.decode().startswith("Copied generation 1 (6 entries")
    assert sorted(os.listdir(target)) == ["latest.py", "pkg", "run.sh"]
    assert os.stat(target / "run.sh").st_mode & 0o7777 == 0o755
    assert os.readlink(target / "latest.py") == "pkg/train.py"
    assert (target / "pkg" / "copy.py").read_bytes() == (target / "pkg" / "train.py").read_bytes()


def test_copy_times_out(ws: Workspace, tmp_path: Path) -> None:
    done = ws.run("copy", "--min-generation", "0", "--target", str(tmp_path / "app"), "--timeout", "1")
    assert done.returncode == 1
    assert done.stderr.decode().strip() == "WorkspaceError: no generation >= 0 published within 1 s"


def test_usage_errors_exit_2(ws: Workspace) -> None:
    done = ws.run("receive", "--generation", "0", "--size", "10", "--sha256", "nothex")
    assert done.returncode == 2 and b"not a hex SHA-256" in done.stderr


def test_fetch_of_a_failed_generation_reports_the_recorded_failure(ws: Workspace) -> None:
    """A re-run sync pod: the same answer, whichever source, without fetching again."""
    assert ws.receive(5, HOSTILE["fifo"][0]).returncode == 1
    done = ws.run("fetch", "--source", "pvc", "--generation", "5")
    assert done.returncode == 1
    assert done.stderr.decode().startswith("InvalidArchive: fifo")
    result = parse_termination_message(ws.termination_log.read_text())
    assert (result.result, result.generation, result.reason) == ("Failed", 5, "InvalidArchive")
