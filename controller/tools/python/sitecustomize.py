"""Framework hooks for every Python process of a worker pod, and the image's own `sitecustomize`.

Python imports `sitecustomize` at start-up from its path; `/opt/torchrun/python` comes first on the
worker's PYTHONPATH (`launch`), so this module runs in torchrun and in every rank. Guarantees:

- Unless `TORCHRUN_FRAMEWORK_HOOKS` is `0` (the job's or queue's `spec.progress.frameworkHooks:
  false`), it registers an import hook (`torchrun_hooks.install`) that acts only when the program
  itself imports the Hugging Face Trainer or Lightning's Trainer: nothing is imported here, and a
  program that uses neither runs exactly as without it.
- The image's own `sitecustomize` (the next one on `sys.path`, e.g. Debian's
  `/usr/lib/python3.13/sitecustomize.py`) still runs, after the hook is registered, and is what
  `sys.modules["sitecustomize"]` holds afterwards; an error in it is reported in one line, as
  Python's `site` does, and start-up goes on.
- Nothing here raises: a failure is one line on stderr and the program runs unhooked.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys

ENV_HOOKS = "TORCHRUN_FRAMEWORK_HOOKS"


def _install_hooks() -> None:
    if os.environ.get(ENV_HOOKS, "1") == "0":
        return
    try:
        importlib.import_module("torchrun_hooks").install()
    except Exception as err:  # never stop a program from starting
        print(f"torchrun hooks: not installed ({type(err).__name__}: {err})", file=sys.stderr)


def _run_the_image_s_own() -> None:
    """Run the next `sitecustomize` on `sys.path` (module doc)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        print(f"Error in sitecustomize ({spec.origin}): {type(err).__name__}: {err}", file=sys.stderr)


_install_hooks()
_run_the_image_s_own()
