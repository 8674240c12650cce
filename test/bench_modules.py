"""The benchmarks' modules (hack/bench/*.py) for unit tests of their pure parts: loaded by path,
since the benchmarks are not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "hack" / "bench"


def load(name: str) -> ModuleType:
    """hack/bench/<name>.py as module `name` (registered in sys.modules: dataclasses look their
    module up by name)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
