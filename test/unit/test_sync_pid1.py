"""pid1: the sync pod's first process waits for the exec'd upload to exit before it exits.

The last test rebuilds the real-node race without Kubernetes: `fetch --source upload` runs as PID
1 of a new PID namespace (`unshare`, as the container runtime does), and `receive` joins that
namespace (`nsenter`, as an exec does) in a shell that lingers after publishing. Without the wait
the kernel kills the shell when `fetch` exits, and the upload reads as exit 137.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sync_archives import good_archive

from controller.sync.pid1 import live_others, wait_for_others
from controller.sync.protocol import PROGRAM, receive_argv

REPO = Path(__file__).resolve().parents[2]
PROC = Path("/proc")


def _state(pid: int) -> str:
    stat = (PROC / str(pid) / "stat").read_text()
    return stat[stat.rfind(")") + 2]


def test_a_running_child_is_live_and_an_exited_one_is_not() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert child.pid in live_others(PROC, os.getpid())
    finally:
        child.kill()
    deadline = time.monotonic() + 10
    while _state(child.pid) != "Z":  # exited, not yet waited for: a zombie
        assert time.monotonic() < deadline, "the killed child never became a zombie"
        time.sleep(0.01)
    assert child.pid not in live_others(PROC, os.getpid())
    child.wait()
    assert os.getpid() not in live_others(PROC, os.getpid())


def test_a_command_name_with_a_parenthesis_and_spaces_is_read_past(tmp_path: Path) -> None:
    for pid, stat in {"7": "7 (a) R (b) S 1 7", "8": "8 (x) Z 1 8", "self": "9 (s) R"}.items():
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_text(stat)
    (tmp_path / "10").mkdir()  # gone between listing and reading: no stat
    assert live_others(tmp_path, 1) == [7]


def test_only_pid_1_waits() -> None:
    sleeps: list[float] = []
    assert wait_for_others(5, me=4242, sleep=sleeps.append) == []
    assert sleeps == []


def test_pid_1_waits_until_the_others_are_gone_and_no_longer(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "stat").write_text("1 (python) S 0 1")
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "stat").write_text("5 (sh) S 0 5")
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s
        if now[0] >= 1.0:
            (tmp_path / "5" / "stat").write_text("5 (sh) Z 0 5")

    assert wait_for_others(30, proc=tmp_path, me=1, clock=lambda: now[0], sleep=sleep) == []
    assert 1.0 <= now[0] < 1.2
    (tmp_path / "5" / "stat").write_text("5 (sh) S 0 5")
    now[0] = -100.0  # from here on the shell never exits

    def tick(s: float) -> None:
        now[0] += s

    assert wait_for_others(2, proc=tmp_path, me=1, clock=lambda: now[0], sleep=tick) == [5]
    assert -98.0 <= now[0] < -97.9


def _namespace_init(unshare: subprocess.Popen[bytes]) -> int:
    """The PID (in ours) of the first process of the namespace `unshare --fork` made."""
    children = PROC / str(unshare.pid) / "task" / str(unshare.pid) / "children"
    deadline = time.monotonic() + 30
    while not children.read_text().split():
        assert unshare.poll() is None, unshare.communicate()
        assert time.monotonic() < deadline, "unshare never started its child"
        time.sleep(0.01)
    return int(children.read_text().split()[0])


def test_an_exec_that_lingers_after_publishing_is_not_killed_by_fetch_exiting(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("a new PID namespace needs root: run the suite as root, as CI does")
    archive = good_archive()
    (tmp_path / "archive").write_bytes(archive)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TORCHRUN_WORKSPACE": str(tmp_path / "ws"),
        "TORCHRUN_TERMINATION_LOG": str(tmp_path / "termination"),
    }
    python = [sys.executable, *PROGRAM[1:]]
    fetch = [*python, "fetch", "--source", "upload", "--timeout", "60", "--generation", "1"]
    unshare = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", *fetch, "--max-bytes", "1000000"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        init = _namespace_init(unshare)
        argv = receive_argv(1, size=len(archive), sha256=hashlib.sha256(archive).hexdigest())
        receive = " ".join([*python, *argv[len(PROGRAM) :]])
        lingering = f"{receive} < {tmp_path / 'archive'}; rc=$?; sleep 2; echo lingered; exit $rc"
        exec_ = subprocess.run(
            ["nsenter", "--target", str(init), "--pid", "--", "sh", "-c", lingering],
            env=env,
            check=False,
            capture_output=True,
            timeout=60,
        )
        out, err = unshare.communicate(timeout=60)
    finally:
        if unshare.poll() is None:
            unshare.kill()
            unshare.wait()
    assert exec_.returncode == 0, (exec_.returncode, exec_.stderr)
    assert exec_.stdout.decode().splitlines()[-1] == "lingered"
    assert unshare.returncode == 0, err
    assert b"Synced generation 1 from upload" in out
