"""What runs in a worker pod loads little at import time.

The in-pod helper modules (`controller/tools/python/`, copied by path into every worker pod by
`sync/prepare.py`, where no import tool sees them) import, at import time, only the standard
library and each other. A framework (torch, Lightning, transformers, ...) may be imported only
inside a hook that runs after the program imported it: the helper must not slow a program's start
by a framework it never uses, nor pick a framework's version before the program does.

Each module is imported in a fresh interpreter from the directory a pod gets (prepare's own
layout), with a stand-in package for every framework on the path: one imported at import time
shows up among the new modules, whether it was imported bare or inside a `try`.

The progress-reporter sidecar (`controller/progress/sidecar/`) likewise loads only the standard
library and the few controller modules it shares with the leader: no third-party package (the
controller's logging, metrics or client libraries) and no controller part that talks to the API."""

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


# what the progress-reporter sidecar (controller/progress/sidecar/, run from the controller's image
# in every worker pod) may load besides the standard library: the parent packages themselves, and
# (with what they contain) its own package, the record format and saved-checkpoint scan it shares
# with the leader, the checkpoint rules and the HTTP listener
SIDECAR_PARENTS = ("controller", "controller.progress")
SIDECAR_MAY_LOAD = (
    "controller.progress.sidecar", "controller.progress.record", "controller.progress.saved",
    "controller.checkpoint", "controller.httpserve",
)  # fmt: skip
SIDECAR = Path(__file__).resolve().parents[2] / "controller" / "progress" / "sidecar"


def sidecar_modules() -> list[str]:
    return sorted(
        f"controller.progress.sidecar.{p.stem}" for p in SIDECAR.glob("*.py") if p.stem != "__init__"
    )


def loaded_by(module: str) -> set[str]:
    """Every module (full dotted name) that importing `module` in a fresh interpreter loads."""
    probe = "import json, sys\nbefore = set(sys.modules)\n__import__(sys.argv[1])\n"
    probe += "print(json.dumps(sorted(set(sys.modules) - before)))"
    done = subprocess.run(
        [sys.executable, "-c", probe, module], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def foreign_to_the_sidecar(loaded: set[str]) -> list[str]:
    return sorted(
        name
        for name in loaded
        if name.split(".")[0] not in sys.stdlib_module_names
        and name not in SIDECAR_PARENTS
        and not any(name == allowed or name.startswith(f"{allowed}.") for allowed in SIDECAR_MAY_LOAD)
    )


def test_the_sidecar_loads_only_the_standard_library_and_its_own_modules_at_import_time() -> None:
    modules = sidecar_modules()
    assert "controller.progress.sidecar.reporter" in modules
    assert {m: foreign_to_the_sidecar(loaded_by(m)) for m in modules} == {m: [] for m in modules}


def test_the_sidecar_check_sees_a_third_party_or_controller_module() -> None:
    assert foreign_to_the_sidecar({"structlog", "structlog.dev"}) == ["structlog", "structlog.dev"]
    assert foreign_to_the_sidecar({"controller.rest", "controller.progress.store"}) == [
        "controller.progress.store", "controller.rest",
    ]  # fmt: skip
    assert (
        foreign_to_the_sidecar({"json", "controller.progress.record", "controller.checkpoint.discovery"})
        == []
    )
