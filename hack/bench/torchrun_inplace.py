"""How reliable torchrun's own in-place restart is with the real node's torch ([recovery]'s question
before it picks a mechanism): N runs in a row, each exactly as two worker pods launch it.

    sudo python hack/bench/torchrun_inplace.py [--runs 20] [--timeout 180]

The training image (hack/testbed/build-node-images.sh: Debian trixie's torch 2.6) is unpacked once
into a temporary root; the tools directory `prepare` lays out goes to its /opt/torchrun. Each run
starts two torchrun agents in that root (chroot, the host's network), as two nodes of one job: c10d
rendezvous on 127.0.0.1 hosted by node 0, one gloo rank each, `--max_restarts=1`, through
`/bin/sh /opt/torchrun/launch torchrun ...`, running test/e2e/realnode/train_checkpoint.py (16
steps, a checkpoint every 4, rank 1 exits 1 after step 9 in the first workers). A run succeeds when
both agents exit 0 and both ranks print `resumed from step 8 ... in-place=1` and `done step=16`;
otherwise its last lines say how it failed (a refused gloo mesh, a hang killed at --timeout).
Needs root (chroot; /proc and /dev are bind-mounted into the root for the runs). Prints one line
per run and the tally. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from controller.sync.prepare import prepare_tools  # noqa: E402

PROGRAM = REPO / "test" / "e2e" / "realnode" / "train_checkpoint.py"
RESUMED = "resumed from step 8 (/ckpt/step-8) attempt=0 in-place=1"


def train_archive() -> Path:
    out = subprocess.run(
        [str(REPO / "hack" / "testbed" / "build-node-images.sh")], check=True, capture_output=True, text=True
    ).stdout
    return Path(next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith("TRAIN_ARCHIVE=")))


def unpack(archive: Path, root: Path) -> None:
    """The image's layers, in order, into `root` (a docker archive: manifest.json names them)."""
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        for layer in manifest[0]["Layers"]:
            with tarfile.open(fileobj=outer.extractfile(layer)) as inner:
                inner.extractall(root, filter="tar")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(root: Path, run: int, timeout: float) -> tuple[bool, float, str]:
    ckpt = root / "ckpt"
    shutil.rmtree(ckpt, ignore_errors=True)
    ckpt.mkdir()
    port = free_port()
    launch = [
        "/bin/sh", "/opt/torchrun/launch", "torchrun", "--nnodes=2", "--nproc_per_node=1", "--max_restarts=1",
        "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id=inplace-{run}",
        "--monitor_interval=1", "/work/train_checkpoint.py", "--steps", "16", "--every", "4",
        "--step-seconds", "0.2", "--fail-rank", "1", "--fail-after", "9",
    ]  # fmt: skip
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "OMP_NUM_THREADS": "1",
        "TORCHRUN_CHECKPOINT_DIR": "/ckpt", "TORCHRUN_ATTEMPT": "0",
    }  # fmt: skip
    start = time.monotonic()
    agents = []
    for node in (0, 1):
        log = open(root / f"work/node{node}.log", "w")  # noqa: SIM115 - closed below
        cmd = ["chroot", str(root), "env", "-i", *[f"{k}={v}" for k, v in env.items()], *launch]
        agents.append(
            (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True), log)
        )
        time.sleep(0.5)  # the first agent hosts the store; the second finds it taken and joins
    codes = []
    for proc, log in agents:
        try:
            codes.append(proc.wait(timeout=max(1.0, timeout - (time.monotonic() - start))))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            codes.append(proc.wait())
        log.close()
    seconds = time.monotonic() - start
    logs = [(root / f"work/node{n}.log").read_text(errors="replace") for n in (0, 1)]
    ok = codes == [0, 0] and all(RESUMED in out and "done step=16" in out for out in logs)
    if ok:
        return True, seconds, ""
    why = [line for out in logs for line in out.splitlines() if "Error" in line or "failed" in line][-3:]
    return False, seconds, f"exit codes {codes}; " + " | ".join(why)[-400:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (chroot)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="torchrun-inplace-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        archive = train_archive()
        unpack(archive, root)
        prepare_tools(root / "opt" / "torchrun", {})
        (root / "work").mkdir(exist_ok=True)
        shutil.copy(PROGRAM, root / "work" / PROGRAM.name)
        mounts = [root / "proc", root / "dev"]
        for where, what in zip(mounts, ("/proc", "/dev"), strict=True):
            where.mkdir(exist_ok=True)
            subprocess.run(["mount", "--bind", what, str(where)], check=True)
        try:
            print(f"image {archive.name}; {args.runs} runs, {args.timeout:.0f} s each at most", flush=True)
            passed = 0
            for run in range(1, args.runs + 1):
                ok, seconds, why = one_run(root, run, args.timeout)
                passed += ok
                print(f"run {run:2d}: {'ok  ' if ok else 'FAIL'} {seconds:6.1f} s {why}", flush=True)
        finally:
            for where in mounts:
                subprocess.run(["umount", "-l", str(where)], check=False)
        print(f"in-place restart resumed from the newest checkpoint in {passed} of {args.runs} runs")
        return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
