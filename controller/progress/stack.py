"""`python -m controller.progress.reporter stack`: a py-spy dump of every Python process of the pod.

Run in the reporter sidecar, which shares the pod's process namespace and (with the queue's
`debug.stackDumps`) holds `SYS_PTRACE`: every process in `/proc` whose program is a Python
interpreter, but the reporter's own processes, is dumped with `py-spy dump --pid P`, every line
prefixed `[rank R pid P]` — R the process's `RANK` environment variable (torchrun sets it in
each worker), `agent` for torchrun's own process. A process py-spy cannot read says so on its
line; no Python process at all is one line too. The exit code is 0 when every dump worked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

DUMP_TIMEOUT = 30.0


def python_processes(proc: Path, skip: set[int]) -> list[tuple[int, str]]:
    """(pid, rank label) of the Python processes under `proc`, by pid, `skip` left out."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read
        program = os.path.basename(argv[0].decode(errors="replace")) if argv and argv[0] else ""
        if not program.startswith("python") and "torchrun" not in program:
            continue
        rank = next((v[5:].decode(errors="replace") for v in environ if v.startswith(b"RANK=")), "agent")
        found.append((int(entry.name), rank))
    return sorted(found)


def ancestors(pid: int, proc: Path) -> set[int]:
    """`pid` and its parents (the reporter, and the exec shell that started this command)."""
    seen = set()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return seen


def dump_all(own_pid: int, proc: Path = Path("/proc")) -> int:
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        print("py-spy is not installed in the reporter's image", flush=True)
        return 1
    processes = python_processes(proc, ancestors(own_pid, proc) | {1})
    if not processes:
        print("no Python process in this pod", flush=True)
        return 1
    failed = 0
    for pid, rank in processes:
        prefix = f"[rank {rank} pid {pid}]"
        try:
            out = subprocess.run(
                [py_spy, "dump", "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=DUMP_TIMEOUT,
                check=False,
            )
            text, ok = out.stdout + out.stderr, out.returncode == 0
        except subprocess.TimeoutExpired:
            text, ok = f"py-spy did not answer within {DUMP_TIMEOUT:g}s", False
        failed += not ok
        for line in text.rstrip("\n").splitlines() or ["(empty)"]:
            print(f"{prefix} {line}", flush=False)
    sys.stdout.flush()
    return 1 if failed else 0
