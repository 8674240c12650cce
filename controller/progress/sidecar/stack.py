"""`python -m controller.progress.sidecar.reporter stack`: a py-spy dump of every Python process.

Run in the reporter sidecar, which shares the pod's process namespace and (with the queue's
`debug.stackDumps`) holds `SYS_PTRACE`: every process in `/proc` whose program is a Python
interpreter, but the reporter's own processes, is dumped with `py-spy dump --pid P`, every line
prefixed `[rank R pid P]` — R the worker's global rank (its `RANK` when its environment is
readable, else from the node's rank and its place among torchrun's workers: `python_processes`),
`agent` for torchrun's own process. A process py-spy cannot read says so on its
line; no Python process at all is one line too. The exit code is 0 when every dump worked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DUMP_TIMEOUT = 30.0


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    argv: list[str]
    rank: str | None  # RANK from its environment, when readable


def read_process(entry: Path) -> Process | None:
    """The process of `/proc/<pid>` `entry`, or None when it is gone. Its environment is often
    unreadable: /proc/<pid>/environ is mode 0400 of the process's user, and the sidecar has
    SYS_PTRACE but not DAC_READ_SEARCH — then `rank` is None."""
    try:
        argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
    try:
        environ = (entry / "environ").read_bytes().split(b"\0")
        rank = next((v[5:].decode(errors="replace") for v in environ if v.startswith(b"RANK=")), None)
    except OSError:
        rank = None
    return Process(int(entry.name), ppid, argv, rank)


def python_processes(proc: Path, skip: set[int], node_rank: int = 0) -> list[tuple[int, str]]:
    """(pid, rank label) of the training's Python processes under `proc`, by pid: `skip` and
    the reporter left out. A process whose parent is one of them is a worker, labelled with its
    RANK, or — its environment unreadable — `node_rank × workers + its place` among its
    parent's workers by pid (torchrun starts local ranks in order); the others are `agent`."""
    found: dict[int, Process] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        p = read_process(entry)
        if p is None or not p.argv or "controller.progress.sidecar.reporter" in p.argv:
            continue
        program = os.path.basename(p.argv[0])
        if program.startswith("python") or "torchrun" in program:
            found[p.pid] = p
    siblings: dict[int, list[int]] = {}
    for p in found.values():
        if p.ppid in found:
            siblings.setdefault(p.ppid, []).append(p.pid)
    labels = []
    for pid in sorted(found):
        p = found[pid]
        if p.ppid not in found:
            labels.append((pid, "agent"))
            continue
        group = sorted(siblings[p.ppid])
        labels.append((pid, p.rank if p.rank is not None else str(node_rank * len(group) + group.index(pid))))
    return labels


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
    node_rank = int(os.environ.get("JOB_COMPLETION_INDEX", "0") or 0)
    processes = python_processes(proc, ancestors(own_pid, proc) | {1}, node_rank)
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
