"""`hack/local-up.sh` as a supervisor or a closed session stops it: a signal to the script alone.

Each test starts the script the way a supervisor or a non-interactive shell's `&` does (SIGINT
ignored on entry, its own session), in a run directory of its own where an earlier run with the
real node left `realnode/images.env` behind, waits until the controller it started is ready, sends
SIGTERM or SIGINT to the script's process alone and checks what is left: no controller, no
control plane process. The stale real node's files must not have changed this run's controller
(it would bind the progress endpoint to the real node's address, gone with it, and die).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from testbed import CONTROLPLANE, REPO, cache_dir, wait_until

LOCAL_UP = REPO / "hack" / "local-up.sh"
STALE_IMAGES = (
    "PAUSE_IMAGE=localhost/torchrun-pause:gone\n"
    "CONTROLLER_IMAGE=localhost/torchrun-controller:gone\n"
    "TRAIN_IMAGE=localhost/torchrun-train:gone\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def argv_of(pid: int) -> list[str]:
    """The process's argv; empty once it is gone (a child may exit between listing and reading)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except (FileNotFoundError, ProcessLookupError):
        return []


def control_plane_pids(run_dir: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text().strip()) for p in (run_dir / "pids").glob("*.pid")}


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A run directory of its own, with what a real node run leaves there after its `down`."""
    path = cache_dir() / f"run-local-up-{uuid.uuid4().hex[:8]}"
    (path / "realnode").mkdir(parents=True)
    (path / "realnode" / "images.env").write_text(STALE_IMAGES)
    yield path
    # `down` with a realnode/ directory would also clean host-wide real node state (its bridge):
    # never for this fake one, whatever the script did
    shutil.rmtree(path / "realnode", ignore_errors=True)
    env = {**os.environ, "TORCHRUN_RUN_DIR": str(path)}
    subprocess.run([str(CONTROLPLANE), "down"], env=env, check=False, timeout=120, capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_script_alone_stops_the_controller_and_the_control_plane(
    sig: signal.Signals, run_dir: Path, tmp_path: Path
) -> None:
    health = free_port()
    env = {k: v for k, v in os.environ.items() if k != "TORCHRUN_REAL_NODE"}
    env |= {"TORCHRUN_RUN_DIR": str(run_dir), "TORCHRUN_NODES": "1"}
    log_path = tmp_path / "local-up.log"
    flags = ["--metrics-addr", f"127.0.0.1:{free_port()}", "--health-addr", f"127.0.0.1:{health}"]
    with open(log_path, "wb") as log:
        script = subprocess.Popen(
            # SIGINT ignored, as a non-interactive shell starts a command with `&` (and many
            # supervisors do): bash cannot trap a signal ignored when it started
            ["bash", "-c", 'trap "" INT; exec bash "$0" "$@"', str(LOCAL_UP), *flags],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    controller: int | None = None
    try:

        def controller_ready() -> int | None:
            if script.poll() is not None:  # not an assert: wait_until would take it for "not yet"
                pytest.fail(f"local-up.sh ended ({script.returncode}):\n{log_path.read_text()[-3000:]}")
            found = [c for c in children(script.pid) if any("torchrun-controller" in a for a in argv_of(c))]
            return found[0] if found and ready(health) else None

        controller = wait_until(controller_ready, 400, interval=0.5, message="the controller ready")
        argv = argv_of(controller)
        # the stale real node changed nothing: no real node flags, and its files are gone
        assert "--progress-bind-address" not in argv and "--sync-image" not in argv, argv
        assert not (run_dir / "realnode").exists()
        plane = control_plane_pids(run_dir)
        assert {"etcd", "kube-apiserver"} <= set(plane) and all(map(alive, plane.values())), plane

        os.kill(script.pid, sig)  # the script alone, not its process group
        try:
            code = script.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"local-up.sh still runs 90 s after {sig.name}:\n{log_path.read_text()[-3000:]}")
        assert code == 128 + sig, log_path.read_text()[-3000:]
        time.sleep(0.5)  # an orphan that outlived the script would still be there
        assert not alive(controller), f"the controller outlived local-up.sh:\n{log_path.read_text()[-3000:]}"
        left = {name: pid for name, pid in plane.items() if alive(pid)}
        assert not left and not control_plane_pids(run_dir), left
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
            script.wait()
        if controller is not None and alive(controller):
            os.kill(controller, signal.SIGKILL)
