"""Counting at the API server: the test bed's audit log (hack/controlplane.sh runs kube-apiserver with
`--audit-log-path $RUN_DIR/audit.log`, JSON lines, Metadata level, every write of every user, in
blocking mode: a write's event is on disk before its response is sent).

A `Window` reads the events logged after it was opened, in one namespace: who wrote (user agent)
and how long the server took for each request (`stageTimestamp - requestReceivedTimestamp`, both
the server's). Writes are create, update, patch, delete and deletecollection, failed ones
included: a refused request costs the server too.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def _when(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def fs_now(directory: Path) -> float:
    """Now by the clock the filesystem dates files with (a file made here and its mtime): the
    kernel's coarse clock can be milliseconds behind `time.time()`, so a file written right after
    `time.time()` was read may carry an earlier mtime (seen: a window missed a log begun after it)."""
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".window-") as probe:
        return os.fstat(probe.fileno()).st_mtime


class Window:
    """The audit events of namespace `ns` from now on (the log's size when opened is the start).

    kube-apiserver rotates its log (lumberjack, 100 MB by default: the file is renamed to
    `audit-<time>.log`, keeping its inode, and a new `audit.log` is begun): the window follows the
    file it opened by inode, from its start offset, then reads every file begun after it whole."""

    def __init__(self, run_dir: Path, ns: str) -> None:
        self.path = run_dir / "audit.log"
        self.ns = ns
        st = self.path.stat() if self.path.exists() else None
        self.start = st.st_size if st else 0
        self.inode = st.st_ino if st else None
        self.opened = fs_now(run_dir)

    def files(self) -> list[tuple[Path, int]]:
        """The log files holding the window's events, oldest first, each with where to read from."""
        found: list[tuple[bool, float, Path, int]] = []  # (begun after the window, mtime, ...)
        for p in self.path.parent.glob("audit*.log"):
            try:
                st = p.stat()
            except FileNotFoundError:  # rotated away between the listing and the stat
                continue
            if st.st_ino == self.inode:
                found.append((False, st.st_mtime, p, self.start))
            elif st.st_mtime >= self.opened:  # begun (or written) after the window opened
                found.append((True, st.st_mtime, p, 0))
        return [(p, offset) for _, _, p, offset in sorted(found, key=lambda f: (f[0], f[1]))]

    def events(self) -> list[dict[str, Any]]:
        """Every complete event of the namespace logged since the window opened."""
        needle = f'"namespace":"{self.ns}"'
        out = []
        for path, offset in self.files():
            with path.open() as f:
                f.seek(offset)
                for line in f:
                    if needle in line and line.endswith("\n"):
                        event = json.loads(line)
                        if (event.get("objectRef") or {}).get("namespace") == self.ns:
                            out.append(event)
        return out

    def writes(self) -> list[dict[str, Any]]:
        done = (e for e in self.events() if e.get("stage") == "ResponseComplete")
        # a server-side dry run (the worker pod's admission check) is audited as a create, stores nothing
        return [e for e in done if e.get("verb") in WRITE_VERBS and "dryRun=" not in str(e.get("requestURI"))]

    def wait_quiet(self, quiet: float = 10.0, timeout: float = 600) -> list[dict[str, Any]]:
        """The namespace's writes once none has come for `quiet` seconds (raises after `timeout`)."""
        deadline = time.monotonic() + timeout
        last = self.writes()
        since = time.monotonic()
        while time.monotonic() - since < quiet:
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {self.ns} never went quiet")
            time.sleep(1)
            now = self.writes()
            if len(now) != len(last):
                last, since = now, time.monotonic()
        return last


def by_agent(writes: list[dict[str, Any]]) -> Counter[str]:
    """Writes per writer: the user agent's program (before the first `/`) and, for
    kube-controller-manager's per-controller service accounts, the controller's name."""
    out: Counter[str] = Counter()
    for e in writes:
        agent = str(e.get("userAgent", "?")).split("/", 1)[0]
        user = e.get("user", {}).get("username", "")
        if user.startswith("system:serviceaccount:kube-system:"):
            agent += ":" + user.rsplit(":", 1)[1]
        out[agent] += 1
    return out


def server_seconds(event: dict[str, Any]) -> float:
    """How long the API server took to answer the request."""
    return _when(event["stageTimestamp"]) - _when(event["requestReceivedTimestamp"])
