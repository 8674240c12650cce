"""Extraction throughput and memory of the sync program's `receive`, against plain `tar -xzf`.

    python hack/bench/bench_sync.py [--size-mb 1024] [--files 100000] [--small-mb 10] [--repeat 2]

Builds a tree of `--files` files totalling `--size-mb` MiB (half random, half repetitive bytes,
so gzip halves it, in directories of 1,000), archives it with `tar -czf`, then extracts the same
archive with `tar -xzf` and with `python -m controller.sync receive` (stdin from the archive,
SHA-256 checked, every member checked, published with its marker). Rates are uncompressed MB/s
and files/s, best of `--repeat`; the ratio is receive / tar (target ≥ 0.7). Peak RSS is each
child's own `ru_maxrss` (GNU time's %M), for a small archive, a big one with as few files, and the
big one: it must not grow with the archive's size (it grows a little with the entry count: one
name per entry is kept to refuse duplicates). Page cache is warm for both. Never a test.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import REPO, table

MIB = 1024 * 1024


@dataclass(frozen=True)
class Archive:
    path: Path
    files: int
    bytes: int

    @property
    def size(self) -> int:
        return self.path.stat().st_size


@dataclass(frozen=True)
class Run:
    seconds: float
    max_rss_kib: int


def build_tree(root: Path, total_bytes: int, files: int, seed: int = 1) -> int:
    """Write `files` files of varied sizes totalling about `total_bytes`; return the exact total."""
    rng = random.Random(seed)
    weights = [rng.paretovariate(1.5) for _ in range(files)]
    scale = total_bytes / sum(weights)
    pattern = bytes(rng.randrange(32, 127) for _ in range(4096))
    written = 0
    for i, w in enumerate(weights):
        size = max(1, int(w * scale))
        d = root / f"d{i // 1000:03d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        half = size // 2
        data = os.urandom(half) + (pattern * (1 + (size - half) // len(pattern)))[: size - half]
        (d / f"f{i:06d}.py").write_bytes(data)
        written += size
    return written


def make_archive(work: Path, name: str, total_bytes: int, files: int) -> Archive:
    tree = work / f"{name}-tree"
    written = build_tree(tree, total_bytes, files)
    path = work / f"{name}.tar.gz"
    subprocess.run(["tar", "--sort=name", "-czf", str(path), "-C", str(tree), "."], check=True)
    shutil.rmtree(tree)
    return Archive(path, files, written)


def timed(argv: list[str], stdin: Path | None, env: dict[str, str] | None = None) -> Run:
    """Run a child to completion; its wall time and its own peak RSS.

    The peak comes from GNU time (`%M`, the child's ru_maxrss): asking wait4 from here would
    report this Python process's size, which a child started from it inherits across exec.
    """
    with tempfile.NamedTemporaryFile("r") as report, open(stdin or os.devnull, "rb") as source:
        start = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", report.name, *argv],
            stdin=source,
            stdout=subprocess.DEVNULL,
            env=env,
            cwd=REPO,
            check=False,
        )
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{argv[:4]} exited {done.returncode}")
        return Run(elapsed, int(report.read().split()[-1]))


def run_tar(archive: Archive, work: Path) -> Run:
    dest = work / "tar-out"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    try:
        return timed(["tar", "-xzf", str(archive.path), "-C", str(dest)], None)
    finally:
        shutil.rmtree(dest)


def run_receive(archive: Archive, work: Path) -> Run:
    workspace = work / "workspace"
    shutil.rmtree(workspace, ignore_errors=True)
    digest = hashlib.sha256()
    with open(archive.path, "rb") as f:
        while chunk := f.read(MIB):
            digest.update(chunk)
    argv = [sys.executable, "-m", "controller.sync", "receive", "--generation", "0"]
    argv += ["--size", str(archive.size), "--sha256", digest.hexdigest()]
    env = {**os.environ, "TORCHRUN_WORKSPACE": str(workspace), "PYTHONPATH": str(REPO)}
    try:
        return timed(argv, archive.path, env)
    finally:
        shutil.rmtree(workspace)


def best(runs: list[Run]) -> Run:
    return Run(min(r.seconds for r in runs), max(r.max_rss_kib for r in runs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024, help="big tree, MiB")
    ap.add_argument("--files", type=int, default=100_000, help="big tree, files")
    ap.add_argument("--small-mb", type=int, default=10, help="small tree (RSS comparison), MiB")
    ap.add_argument("--small-files", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workdir", help="where to build (default: a temp dir, removed)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sync-", dir=args.workdir))
    try:
        archives = {
            "small": make_archive(work, "small", args.small_mb * MIB, args.small_files),
            "big, few files": make_archive(work, "bigfew", args.size_mb * MIB, args.small_files),
            "big": make_archive(work, "big", args.size_mb * MIB, args.files),
        }
        rows = []
        for label, archive in archives.items():
            tar = best([run_tar(archive, work) for _ in range(args.repeat)])
            rec = best([run_receive(archive, work) for _ in range(args.repeat)])
            rows.append(row(label, archive, "tar -xzf", tar, None))
            rows.append(row(label, archive, "sync receive", rec, tar))
        headers = [
            "archive",
            "files",
            "MiB",
            "gz MiB",
            "program",
            "s",
            "MB/s",
            "files/s",
            "x tar",
            "peak RSS MiB",
        ]
        print(table(headers, rows))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def row(label: str, archive: Archive, program: str, run: Run, baseline: Run | None) -> list[object]:
    ratio = f"{baseline.seconds / run.seconds:.2f}" if baseline else ""
    return [
        label,
        archive.files,
        f"{archive.bytes / MIB:.0f}",
        f"{archive.size / MIB:.0f}",
        program,
        f"{run.seconds:.2f}",
        f"{archive.bytes / 1e6 / run.seconds:.0f}",
        f"{archive.files / run.seconds:.0f}",
        ratio,
        f"{run.max_rss_kib / 1024:.1f}",
    ]


if __name__ == "__main__":
    main()
