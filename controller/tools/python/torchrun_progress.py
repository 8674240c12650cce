"""Progress reports from a training program run by torchrun-controller.

Every worker pod has this module on PYTHONPATH (`/opt/torchrun/python`, no image change needed).
Standard library only.

    import torchrun_progress
    for step in range(total):
        loss = train_step()
        torchrun_progress.report(step=step + 1, total_steps=total, loss=loss)

`report(**values)` appends one JSON line to the file named by `TORCHRUN_PROGRESS_FILE` (the
controller sets it in every rank; the pod's reporter sidecar follows it and the job's
`status.progress` shows it). Known keys: `step`, `total_steps`, `epoch`, `samples_per_second`;
every other key is one of your metrics (at most 32 per line, finite numbers only, names
`[A-Za-z_][A-Za-z0-9_.:/-]*`; anything else is dropped by the reporter). Only rank 0 reports by
default (`RANK`); `report(..., all_ranks=True)` writes from every rank (each line carries its
`rank`). It never raises for a value it cannot write and costs one small write: call it every
step, or every few. Without `TORCHRUN_PROGRESS_FILE` (run outside the controller) it does nothing.
"""

from __future__ import annotations

import json
import math
import os

ENV_FILE = "TORCHRUN_PROGRESS_FILE"
MAX_LINE = 16 * 1024  # the reporter refuses longer lines


def report(*, all_ranks: bool = False, **values: float) -> bool:
    """Append `values` as one progress record; True when a line was written."""
    path = os.environ.get(ENV_FILE)
    rank = _rank()
    if not path or (rank not in (None, 0) and not all_ranks):
        return False
    record: dict[str, float] = {}
    for key, value in values.items():
        number = _number(value)
        if number is not None:
            record[key] = number
    if rank is not None:
        record["rank"] = rank
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    if len(line) > MAX_LINE:
        return False
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
    """`value` as a finite number (a 0-d tensor or numpy scalar converts), else None."""
    if isinstance(value, bool):
        return None
    if not isinstance(value, (int, float)):
        try:
            value = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
    return value if math.isfinite(value) else None


def _rank() -> int | None:
    try:
        return int(os.environ["RANK"])
    except (KeyError, ValueError):
        return None
