"""Shared benchmark plumbing: a private control plane for the run, RSS readings, a table printer."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTROLPLANE = REPO / "hack" / "controlplane.sh"


@contextlib.contextmanager
def control_plane(nodes: int = 4, pods_per_node: int = 110) -> Iterator[Path]:
    """Start a fresh control plane in a temporary state dir; yield its admin kubeconfig."""
    run_dir = Path(tempfile.mkdtemp(prefix="torchrun-bench-"))
    env = {
        **os.environ,
        "TORCHRUN_RUN_DIR": str(run_dir),
        "TORCHRUN_NODES": str(nodes),
        "TORCHRUN_NODE_PODS": str(pods_per_node),
    }
    try:
        subprocess.run([str(CONTROLPLANE), "up"], env=env, check=True, stdout=subprocess.DEVNULL)
        yield run_dir / "admin.kubeconfig"
    finally:
        subprocess.run([str(CONTROLPLANE), "down"], env=env, check=False)
        shutil.rmtree(run_dir, ignore_errors=True)


def rss_kib(pid: int | str = "self", field: str = "VmRSS") -> int:
    """Resident memory of a process in KiB (`VmHWM` for its peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else float("nan")


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)
