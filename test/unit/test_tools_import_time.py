"""The in-pod helper modules (`controller/tools/python/`, copied by path into every worker pod by
`sync/prepare.py`, where no import tool sees them) import, at import time, only the standard
library and each other. A framework (torch, Lightning, transformers, ...) may be imported only
inside a hook that runs after the program imported it: the helper must not slow a program's start
by a framework it never uses, nor pick a framework's version before the program does.

Each module is imported in a fresh interpreter from the directory a pod gets (prepare's own
layout), with a stand-in package for every framework on the path: one imported at import time
shows up among the new modules, whether it was imported bare or inside a `try`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.sync.prepare import prepare_tools

# what an in-pod helper may reach for once the program runs: never at import time
FRAMEWORKS = (
    "torch", "lightning", "pytorch_lightning", "transformers", "accelerate", "deepspeed", "safetensors",
)  # fmt: skip

PROBE = """
import json, sys
before = set(sys.modules)
__import__(sys.argv[1])
print(json.dumps(sorted({m.split(".")[0] for m in set(sys.modules) - before})))
"""


@pytest.fixture(scope="module")
def pod_tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """/opt/torchrun as `prepare` lays it out, and a directory of framework stand-ins."""
    root = tmp_path_factory.mktemp("opt-torchrun")
    prepare_tools(root / "torchrun", {})
    for name in FRAMEWORKS:
        (root / "frameworks" / name).mkdir(parents=True)
        (root / "frameworks" / name / "__init__.py").write_text("")
    return root


def helper_modules(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "torchrun" / "python").glob("*.py"))


def imported_by(root: Path, module: str) -> set[str]:
    """The top-level modules that importing `module` (as a pod does) brings in."""
    path = [str(root / "torchrun" / "python"), str(root / "frameworks")]
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path[:0] = {path!r}\n{PROBE}", module],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def test_every_helper_module_imports_only_the_standard_library_and_its_siblings(pod_tools: Path) -> None:
    modules = helper_modules(pod_tools)
    assert {"torchrun_progress", "torchrun_checkpoint", "torchrun_checkpoint_discovery"} <= set(modules)
    allowed = set(sys.stdlib_module_names) | set(modules)
    foreign = {m: sorted(imported_by(pod_tools, m) - allowed) for m in modules}
    assert foreign == {m: [] for m in modules}, "import a framework inside the hook that needs it"


def test_the_probe_sees_a_framework_imported_inside_a_try(pod_tools: Path, tmp_path: Path) -> None:
    """The check above can fail: a helper that tries torch at import time is caught."""
    planted = tmp_path / "planted"
    (planted / "torchrun" / "python").mkdir(parents=True)
    (planted / "torchrun" / "python" / "torchrun_planted.py").write_text(
        "try:\n    import torch\nexcept ImportError:\n    torch = None\n"
    )
    (planted / "frameworks").symlink_to(pod_tools / "frameworks")
    assert "torch" in imported_by(planted, "torchrun_planted")
