"""Checkpoints and resume for a training program run by torchrun-controller (docs/checkpoints.md).

Every worker pod has this module on PYTHONPATH (`/opt/torchrun/python`, no image change needed).
Standard library only. What it offers:

- `checkpoint_dir()`: the job's checkpoint root (`TORCHRUN_CHECKPOINT_DIR`), None without one;
  `path_for(step)`: `<root>/step-<step>` (created if missing), a name the controller reads the
  step from, with our `.torchrun_started` in it: what proves to retention that an incomplete
  `step-<step>` is an abandoned save of ours (anything else incomplete is never removed);
- `resume_from()`: the latest complete checkpoint the controller found before this start
  (`TORCHRUN_RESUME_FROM`: a directory, or a checkpoint file such as Lightning's
  `epoch=0-step=10.ckpt` or a `ckpt_1000.pt`), or None: none yet, or it has disappeared since
  (said on stderr).
  After the workers restarted in place (`TORCHELASTIC_RESTART_COUNT` > 0: a rank failed under
  torchrun's `--max_restarts`, an elastic job shrank or grew; or `TORCHRUN_IN_PLACE_GENERATION` > 0:
  the supervisor started a fresh torchrun, `torchrun_supervisor.py`) that choice may be old, so the root is
  scanned again with the controller's own rules (`torchrun_checkpoint_discovery`, copied here by
  `prepare`);
- `mark_complete(path)`: after every rank has written `path`, rank 0 calls this; only then does the
  controller count it (what a framework writes — a `torch.distributed.checkpoint` directory, a
  Hugging Face `checkpoint-<step>/`, Lightning, DeepSpeed, accelerate, torch.save and safetensors
  files — counts without it, by that framework's own completeness check: docs/checkpoints.md);
- `stop_requested()`: True once the pod was asked to stop (the controller's suspend, shrink, hot
  reload, deadline or graceful delete: torchrun forwards the container's SIGTERM to this process).
  Importing this module makes that signal (`TORCHRUN_STOP_SIGNAL`, SIGTERM) set a flag instead of
  ending the process — unless the program already handles it — so check it every step, save,
  and exit; torchrun kills what is still running after its own grace time.
- `attempt()`: the whole-job restart this run belongs to (`TORCHRUN_ATTEMPT`, 0 first).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

ENV_DIR = "TORCHRUN_CHECKPOINT_DIR"
ENV_RESUME = "TORCHRUN_RESUME_FROM"
ENV_ATTEMPT = "TORCHRUN_ATTEMPT"
ENV_STOP_SIGNAL = "TORCHRUN_STOP_SIGNAL"
MARKER = ".torchrun_complete"
STARTED = ".torchrun_started"  # discovery.STARTED: this directory was handed out by path_for
ENV_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
ENV_GENERATION = "TORCHRUN_IN_PLACE_GENERATION"  # torchrun_supervisor.ENV_GENERATION
DISCOVERY = "torchrun_checkpoint_discovery"  # controller/checkpoint/discovery.py, copied by prepare

_stop = threading.Event()


def checkpoint_dir() -> Path | None:
    """The job's checkpoint root, or None when the queue gives the job none."""
    value = os.environ.get(ENV_DIR)
    return Path(value) if value else None


def path_for(step: int) -> Path:
    """Where to save the checkpoint of `step`: `<root>/step-<step>`, created if missing, holding
    our `STARTED` file (module doc)."""
    root = checkpoint_dir()
    if root is None:
        raise RuntimeError(f"{ENV_DIR} is not set: the job's queue has no checkpoints volume")
    path = root / f"step-{int(step)}"
    path.mkdir(exist_ok=True)
    started = path / STARTED
    if not started.exists():
        with contextlib.suppress(FileExistsError):  # another rank wrote it first
            os.close(os.open(started, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
    return path


def resume_from() -> Path | None:
    """The checkpoint to resume from, or None to start from scratch (module doc)."""
    if _restarted_in_place() and (root := checkpoint_dir()) is not None:
        rules: Any = importlib.import_module(DISCOVERY)
        chosen = rules.latest(rules.scan(root))
        return Path(chosen.path) if chosen is not None else None
    value = os.environ.get(ENV_RESUME)
    if not value:
        return None
    path = Path(value)
    if not path.exists():
        print(f"torchrun_checkpoint: {path} disappeared since this start chose it", file=sys.stderr)
        return None
    return path


def mark_complete(path: str | os.PathLike[str]) -> Path:
    """Mark checkpoint directory `path` complete (its marker is written in one step, last)."""
    directory = Path(path)
    data = json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode()
    fd, tmp = tempfile.mkstemp(prefix=f"{MARKER}.tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.rename(tmp, directory / MARKER)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return directory / MARKER


def stop_requested() -> bool:
    """True once the stop signal arrived (module doc)."""
    return _stop.is_set()


class StopVote:
    """The ranks' agreement on the step to stop at (module doc)."""

    def __init__(self) -> None:
        self._dist: Any = None
        self._group: Any = None
        self._pending: tuple[Any, Any] | None = None
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            self._dist = dist
            self._group = dist.new_group(backend="gloo")  # collective: every rank builds its vote here

    def should_stop(self) -> bool:
        """True on every rank at the same call, the call after some rank's `stop_requested()`."""
        if self._dist is None:
            return stop_requested()
        if self._pending is not None:
            work, flag = self._pending
            self._pending = None
            work.wait()
            if int(flag[0]) > 0:  # a CPU tensor: reading it waits for no device
                return True
        torch = importlib.import_module("torch")  # present wherever a process group is
        flag = torch.tensor([1 if stop_requested() else 0], dtype=torch.int32)
        work = self._dist.all_reduce(flag, op=self._dist.ReduceOp.MAX, group=self._group, async_op=True)
        self._pending = (work, flag)
        return False


def _restarted_in_place() -> bool:
    """torchrun restarted this node's workers (TORCHELASTIC_RESTART_COUNT, set by torchrun), or
    the supervisor started a later generation (TORCHRUN_IN_PLACE_GENERATION)."""
    return any(
        (value := os.environ.get(name, "0")).isdigit() and int(value) > 0
        for name in (ENV_RESTART_COUNT, ENV_GENERATION)
    )


def attempt() -> int:
    """The whole-job restart number of this run (0 for the first)."""
    value = os.environ.get(ENV_ATTEMPT, "0")
    return int(value) if value.isdigit() else 0


def _on_stop(signum: int, frame: FrameType | None) -> None:
    _stop.set()


def _install() -> None:
    """Catch the stop signal if nobody else does (signals can only be set from the main thread)."""
    name = os.environ.get(ENV_STOP_SIGNAL) or "SIGTERM"
    signum = getattr(signal, name, None)
    if not isinstance(signum, signal.Signals) or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signum) in (signal.SIG_DFL, None):
        signal.signal(signum, _on_stop)


_install()
