"""No code change for the Hugging Face Trainer and Lightning (docs/checkpoints.md, "Frameworks").

`install()` (called by this directory's `sitecustomize`) adds an import hook for the two modules
that define the trainers: `transformers.trainer` and Lightning's `trainer.trainer` (both
`lightning.pytorch` and `pytorch_lightning`). When — and only when — the program imports one, its
`Trainer` class is patched right after the module ran. Each hooked Trainer:

- reports progress (`torchrun_progress.report`): step, total steps, epoch, and the loss and
  learning rate the framework logs, with no device synchronisation (tensors are passed as they
  are);
- saves its checkpoints on the job's checkpoints volume (`TORCHRUN_CHECKPOINT_DIR`): an HF
  Trainer's `checkpoint-<step>/` directories go to the root instead of `args.output_dir` (only
  those: `save_model()` still writes where the program says), Lightning's `ModelCheckpoint`s whose
  `dirpath` is unset or outside the root save to the root. One line on stderr (rank 0) says so;
- resumes when the program passed no resume point of its own (HF `resume_from_checkpoint` None,
  Lightning `ckpt_path` None) from the checkpoint this start chose (`torchrun_checkpoint
  .resume_from()`), and only when that is the framework's own kind (an HF `checkpoint-<step>/`;
  a Lightning `.ckpt`): an HF Trainer is never handed a `step-N/` or a Lightning file; `True`
  (HF: "the last one") means the newest HF checkpoint under the root;
- stops cleanly when the pod is asked to stop (`stop_requested()`): HF agrees on the step across
  ranks (`torchrun_checkpoint.StopVote`), saves `checkpoint-<step>/` and exits; Lightning's own
  SIGTERM handling already stops every rank at one batch, and the hook saves
  `epoch=<e>-step=<s>.ckpt` before it exits.

Nothing here raises into the program's start: a Trainer whose version lacks what a patch needs is
left unhooked with one line on stderr. Standard library only at import time.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

# the module that defines each Trainer -> the patch applied once it ran
TARGETS = {
    "transformers.trainer": "hf",
    "lightning.pytorch.trainer.trainer": "lightning",
    "pytorch_lightning.trainer.trainer": "lightning",
}
HF_KIND = "hf"  # torchrun_checkpoint_discovery.HF
LIGHTNING_KIND = "lightning"  # torchrun_checkpoint_discovery.LIGHTNING
PATCHED = "_torchrun_hooked"


def say(message: str) -> None:
    """One line on stderr from rank 0 (every rank for a failure worth seeing from each)."""
    if os.environ.get("RANK", "0") == "0":
        print(f"torchrun hooks: {message}", file=sys.stderr, flush=True)


class _Loader(importlib.abc.Loader):
    """The real loader, then the patch (module doc)."""

    def __init__(self, real: importlib.abc.Loader, kind: str) -> None:
        self.real = real
        self.kind = kind

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.real.exec_module(module)
        patch(module, self.kind)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ... of the real loader
        return getattr(self.real, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the trainer modules with the other finders and wraps their loader."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        kind = TARGETS.get(fullname)
        if kind is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, kind)
                return spec
        return None


def install() -> None:
    """Register the import hook once; patch a trainer module imported already."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    for name, kind in TARGETS.items():
        if name in sys.modules:
            patch(sys.modules[name], kind)


def patch(module: ModuleType, kind: str) -> None:
    """Patch `module.Trainer` for `kind` once; on any error leave it as it is (module doc)."""
    trainer = getattr(module, "Trainer", None)
    if trainer is None or getattr(trainer, PATCHED, False):
        return
    try:
        (_patch_hf if kind == "hf" else _patch_lightning)(trainer)
        setattr(trainer, PATCHED, True)
    except Exception as err:
        say(f"{module.__name__}.Trainer left unhooked ({type(err).__name__}: {err})")


def _sibling(name: str) -> Any:
    """`torchrun_<name>`, this directory's helper module (imported when a hook first needs it)."""
    return importlib.import_module(f"torchrun_{name}")


def checkpoint_root() -> Path | None:
    """The job's checkpoint root (`torchrun_checkpoint.checkpoint_dir`), None without one."""
    root: Path | None = _sibling("checkpoint").checkpoint_dir()
    return root


def _rules() -> Any:
    return _sibling("checkpoint_discovery")


def resume_point(kind: str) -> Path | None:
    """The checkpoint this start chose, when it is of `kind` (module doc); else None."""
    chosen: Path | None = _sibling("checkpoint").resume_from()
    if chosen is None:
        return None
    entry = _rules().entry_at(chosen.parent, chosen.name)
    if entry is None or not entry.complete or entry.kind != kind:
        say(f"not resuming from {chosen.name}: it is not a {kind} checkpoint")
        return None
    return chosen


def newest_of(kind: str) -> Path | None:
    """The newest complete checkpoint of `kind` under the root, or None."""
    root = checkpoint_root()
    if root is None:
        return None
    rules = _rules()
    chosen = rules.latest([e for e in rules.scan(root) if e.kind == kind])
    return Path(chosen.path) if chosen is not None else None


def _wrap(cls: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    original = getattr(cls, name)
    setattr(cls, name, functools.wraps(original)(make(original)))


def _after_init(cls: type, then: Callable[[Any], None]) -> None:
    """`cls.__init__` as it was, then `then(self)`."""

    def init(original: Callable[..., Any]) -> Callable[..., Any]:
        def hooked_init(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            then(self)

        return hooked_init

    _wrap(cls, "__init__", init)


# -- Hugging Face Trainer -------------------------------------------------------------------------


def _patch_hf(trainer: type) -> None:
    callback = _hf_callback(importlib.import_module("transformers").TrainerCallback)
    for needed in ("_get_output_dir", "train", "add_callback"):
        if not callable(getattr(trainer, needed, None)):
            raise AttributeError(f"Trainer has no {needed}")

    def hook(trainer: Any) -> None:
        trainer.add_callback(callback())
        root = checkpoint_root()
        where = getattr(trainer.args, "output_dir", None)
        if root is not None and (where is None or not _inside(Path(where), root)):
            say(f"Trainer checkpoints go to {root} (output_dir {where} keeps the rest)")

    def output_dir(original: Callable[..., Any]) -> Callable[..., Any]:
        def _get_output_dir(self: Any, trial: Any = None, *args: Any, **kwargs: Any) -> Any:
            root = checkpoint_root()
            if root is not None and trial is None:
                return str(root)
            return original(self, trial, *args, **kwargs)

        return _get_output_dir

    def train(original: Callable[..., Any]) -> Callable[..., Any]:
        def train(self: Any, *args: Any, **kwargs: Any) -> Any:
            given = args[0] if args else kwargs.get("resume_from_checkpoint")
            chosen = None
            if given is None:
                chosen = resume_point(HF_KIND)
            elif given is True:
                chosen = newest_of(HF_KIND)
            if chosen is not None:
                say(f"Trainer resumes from {chosen}")
                if args:
                    args = (str(chosen), *args[1:])
                else:
                    kwargs["resume_from_checkpoint"] = str(chosen)
            return original(self, *args, **kwargs)

        return train

    _after_init(trainer, hook)
    _wrap(trainer, "_get_output_dir", output_dir)
    _wrap(trainer, "train", train)


def _hf_callback(base: type) -> type:
    """The TrainerCallback every hooked Trainer gets (module doc)."""
    torchrun_checkpoint, torchrun_progress = _sibling("checkpoint"), _sibling("progress")

    class TorchrunCallback(base):  # type: ignore[misc]
        def __init__(self) -> None:
            self.values: dict[str, Any] = {}
            self.vote: Any = None
            self.stopping = False

        def _report(self, state: Any, **values: Any) -> None:
            self.values.update({k: v for k, v in values.items() if v is not None})
            self.values.update(step=state.global_step, epoch=state.epoch)
            if state.max_steps and state.max_steps > 0:
                self.values["total_steps"] = state.max_steps
            torchrun_progress.report(**self.values)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.vote = torchrun_checkpoint.StopVote()
            self._report(state)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._report(state)
            if self.vote is not None and self.vote.should_stop():
                say(f"stop requested: saving checkpoint-{state.global_step} and stopping")
                self.stopping = True
                control.should_save = True
                control.should_training_stop = True

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            logs = logs or {}
            self._report(state, loss=logs.get("loss"), learning_rate=logs.get("learning_rate"))

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.stopping:
                torchrun_progress.flush()
                raise SystemExit(0)  # asked to stop: saved; nothing after train() runs

    return TorchrunCallback


# -- Lightning -------------------------------------------------------------------------------------


def _patch_lightning(trainer: type) -> None:
    base = importlib.import_module(trainer.__module__.split(".trainer.")[0] + ".callbacks").Callback
    callback = _lightning_callback(base)

    def fit(original: Callable[..., Any]) -> Callable[..., Any]:
        def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
            if len(args) < 5 and kwargs.get("ckpt_path") is None:
                chosen = resume_point(LIGHTNING_KIND)
                if chosen is not None:
                    say(f"Trainer.fit resumes from {chosen}")
                    kwargs["ckpt_path"] = str(chosen)
            return original(self, *args, **kwargs)

        return fit

    # first: its setup runs before ModelCheckpoint's, which resolves the dirpath
    _after_init(trainer, lambda t: t.callbacks.insert(0, callback()))
    _wrap(trainer, "fit", fit)


def _lightning_callback(base: type) -> type:
    """The Callback every hooked Lightning Trainer gets first (module doc)."""
    torchrun_checkpoint, torchrun_progress = _sibling("checkpoint"), _sibling("progress")

    class TorchrunCallback(base):  # type: ignore[misc]
        def __init__(self) -> None:
            self.total: int | None = None

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            root = checkpoint_root()
            if root is None or stage != "fit":
                return
            for cb in trainer.checkpoint_callbacks:
                where = getattr(cb, "dirpath", None)
                if where is None or not _inside(Path(where), root):
                    cb.dirpath = str(root)
                    say(f"ModelCheckpoint saves to {root}" + (f" (not {where})" if where else ""))

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
            if total is None:
                try:
                    estimated = trainer.estimated_stepping_batches
                    total = int(estimated) if estimated != float("inf") else None
                except Exception:
                    total = None
            self.total = total

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, idx: int) -> None:
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if loss is not None and hasattr(loss, "detach"):
                loss = loss.detach()
            values: dict[str, Any] = {"step": trainer.global_step, "epoch": trainer.current_epoch}
            if self.total is not None:
                values["total_steps"] = self.total
            if loss is not None:
                values["loss"] = loss
            if trainer.optimizers:
                values["learning_rate"] = trainer.optimizers[0].param_groups[0].get("lr")
            torchrun_progress.report(**values)

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            root = checkpoint_root()
            stopped = type(exception).__name__ == "SIGTERMException" or torchrun_checkpoint.stop_requested()
            if root is None or not stopped or getattr(trainer.state, "fn", None) != "fit":
                return
            path = root / f"epoch={trainer.current_epoch}-step={trainer.global_step}.ckpt"
            if not path.exists():
                say(f"stop requested: saving {path.name}")
                trainer.save_checkpoint(str(path))  # every rank: Lightning's save is collective
            torchrun_progress.flush()

    return TorchrunCallback


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True
