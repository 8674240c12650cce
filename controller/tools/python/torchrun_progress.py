"""Progress reports from a training program run by torchrun-controller.

Every worker pod has this module on PYTHONPATH (`/opt/torchrun/python`, no image change needed).
Standard library only.

    import torchrun_progress
    for step in range(total):
        loss = train_step()
        torchrun_progress.report(step=step + 1, total_steps=total, loss=loss)  # a tensor is fine

`report(**values)` keeps the newest values; a writer thread appends them as one JSON line to the
file named by `TORCHRUN_PROGRESS_FILE` (the controller sets it in every rank; the pod's reporter
sidecar follows it and the job's `status.progress` shows it) at most once every `INTERVAL`
seconds, and the last values once more when the process exits. Known keys: `step`,
`total_steps`, `epoch`, `samples_per_second`; every other key is one of your metrics (at most 32
per line, finite numbers only, names `[A-Za-z_][A-Za-z0-9_.:/-]*`; anything else is dropped by the
reporter). Only rank 0 reports by default (`RANK`); `report(..., all_ranks=True)` writes from every
rank (each line carries its `rank`).

It never slows the training loop: `report` converts nothing and makes no device call — it keeps
references — so pass a CUDA tensor (`loss=loss`) rather than `float(loss)`, which waits for the GPU
at every step. The writer thread converts: for a CUDA tensor it waits for the device itself
(`torch.cuda.synchronize` in that thread: the values are then final, whatever stream made them),
so only it waits. Call `report` every step. It never raises for a value it cannot write; without
`TORCHRUN_PROGRESS_FILE` (run outside the controller) it does nothing. `flush()` writes what is
pending now (exit does it by itself).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import threading
import time
from typing import Any

ENV_FILE = "TORCHRUN_PROGRESS_FILE"
MAX_LINE = 16 * 1024  # the reporter refuses longer lines
INTERVAL = 1.0  # seconds between two lines of one process (the sidecar reads the file every second)


class _Writer:
    """The newest values and the thread that writes them (module doc)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.writing = threading.Lock()  # one write at a time: lines land in the order taken
        self.latest: tuple[str, int | None, dict[str, Any]] | None = None
        self.version = 0  # bumped by every report
        self.written = 0  # the version last written
        self.last_write = -math.inf
        self.thread: threading.Thread | None = None

    def put(self, path: str, rank: int | None, values: dict[str, Any]) -> None:
        with self.cond:
            self.latest = (path, rank, values)
            self.version += 1
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="torchrun-progress", daemon=True)
                self.thread.start()
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while self.written == self.version:
                    self.cond.wait()
                wait = self.last_write + INTERVAL - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self.write_pending()

    def write_pending(self) -> bool:
        """Write the newest values if they were not written yet; True when a line was written."""
        with self.writing:
            with self.cond:
                if self.latest is None or self.written == self.version:
                    return False
                (path, rank, values), version = self.latest, self.version
                self.written, self.last_write = version, time.monotonic()
            line = _line(values, rank)
            return line is not None and _append(path, line)


_writer = _Writer()


def report(*, all_ranks: bool = False, **values: Any) -> bool:
    """Keep `values` as the newest progress record (module doc); True when it will be written:
    the file is set, this rank reports, and the record can fit one line."""
    global _writer
    path = os.environ.get(ENV_FILE)
    rank = _rank()
    if not path or (rank not in (None, 0) and not all_ranks):
        return False
    if sum(len(key) + 26 for key in values) > MAX_LINE:  # 26: the longest a number and its quotes take
        return False
    if _writer.pid != os.getpid():  # a forked child: the parent's thread is not here
        _writer = _Writer()
    _writer.put(path, rank, dict(values))
    return True


def flush() -> bool:
    """Write the newest values now, from the caller's thread, if they were not written yet; True
    when a line was written."""
    return _writer.write_pending()


def _line(values: dict[str, Any], rank: int | None) -> bytes | None:
    record: dict[str, float] = {}
    for key, value in values.items():
        number = _number(value)
        if number is not None:
            record[key] = number
    if rank is not None:
        record["rank"] = rank
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    return line if len(line) <= MAX_LINE else None


def _append(path: str, line: bytes) -> bool:
    try:
        # one write of one line with O_APPEND: lines of several ranks never interleave
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def _number(value: object) -> float | None:
    """`value` as a finite number (a 0-d tensor or numpy scalar converts), else None. A CUDA
    tensor is read after the device finished what was queued (this runs in the writer thread)."""
    if isinstance(value, bool):
        return None
    if not isinstance(value, (int, float)):
        try:
            device = getattr(value, "device", None)
            torch = sys.modules.get("torch")
            if torch is not None and getattr(device, "type", None) == "cuda":
                torch.cuda.synchronize(device)
            value = float(value.detach() if hasattr(value, "detach") else value)  # type: ignore[arg-type]
        except (TypeError, ValueError, RuntimeError):
            return None
    return value if math.isfinite(value) else None


def _rank() -> int | None:
    try:
        return int(os.environ["RANK"])
    except (KeyError, ValueError):
        return None


atexit.register(lambda: _writer.write_pending() if _writer.pid == os.getpid() else None)
