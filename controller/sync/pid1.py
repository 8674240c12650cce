"""The sync pod's first process outlives the uploads it waited for.

`fetch --source upload` is the sync container's first process: PID 1 of its PID namespace. When
PID 1 exits, the kernel SIGKILLs every other process in the namespace, and the plugin's
`receive` or `delta` — exec'd into the same container — is one of them: it publishes the
generation (which ends `fetch`'s wait) a moment before it prints its answer and exits. Killed in
that moment, the plugin reads exit code 137 for an upload that succeeded, or loses the reason of
one that failed. So `fetch`, as PID 1, waits a bounded time for the other processes to end first.

`live_others` reads `/proc` (in a container: the namespace's own); zombies do not count, as they
have already exited and their status has gone to their parent (the runtime, for an exec).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")
GRACE = 30.0  # seconds: an exec needs well under one to print and exit after it published
POLL = 0.05
_GONE = frozenset("ZX")  # zombie, dead


def live_others(proc: Path, me: int) -> list[int]:
    """The PIDs under `proc` other than `me` whose process has not exited (sorted)."""
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended while we looked
            continue
        state = stat[stat.rfind(")") + 2 :][:1]  # `pid (comm) S ...`; comm may hold ") "
        if state not in _GONE:
            pids.append(int(entry.name))
    return sorted(pids)


def wait_for_others(
    timeout: float = GRACE,
    *,
    proc: Path = PROC,
    me: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[int]:
    """When this process is PID 1 of its namespace, wait up to `timeout` seconds until no other
    live process remains; the PIDs still live then ([] at once when this is not PID 1)."""
    me = os.getpid() if me is None else me
    if me != 1:
        return []
    deadline = clock() + timeout
    while True:
        others = live_others(proc, me)
        if not others or clock() >= deadline:
            return others
        sleep(POLL)
