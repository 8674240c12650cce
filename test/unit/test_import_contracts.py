"""`.importlinter` catches the next slip: in a temporary copy of the tree, each planted fault
breaks the contract meant for it — a plugin module importing the job controller or the caches, a
cycle between two sibling modules, a renamed layer — while the tree as it is keeps every one."""

from __future__ import annotations

import configparser
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / ".importlinter")],
        cwd=root, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "COLUMNS": "500"},  # one contract a line: its name and KEPT/BROKEN
    )  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The package and the contracts, copied (no bytecode)."""
    shutil.copytree(
        REPO / "controller", tmp_path / "controller", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def plant(path: Path, line: str) -> None:
    """Add an import after the module's docstring and `from __future__` line."""
    lines = path.read_text().splitlines()
    at = next(i for i, text in enumerate(lines) if text.startswith("from __future__")) + 1
    path.write_text("\n".join([*lines[:at], line, *lines[at:]]) + "\n")


def broken(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The names of the contracts a run reports broken."""
    return [
        line.removesuffix(" BROKEN").strip() for line in result.stdout.splitlines() if line.endswith("BROKEN")
    ]


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = lint(tree)
    assert result.returncode == 0 and not broken(result), result.stdout + result.stderr


@pytest.mark.parametrize("imported", ["controller.torchrunjob.controller", "controller.cache.informer"])
def test_a_plugin_module_importing_the_job_controller_or_the_caches_breaks_a_contract(
    tree: Path, imported: str
) -> None:
    plant(tree / "controller" / "plugin" / "submit.py", f"import {imported}  # noqa")
    result = lint(tree)
    assert result.returncode != 0
    assert any("plugin" in name.lower() for name in broken(result)), result.stdout


def test_a_cycle_between_sibling_modules_breaks_a_contract(tree: Path) -> None:
    # kubeconfig.py imports config.py; config.py importing kubeconfig.py closes a cycle
    assert (
        "from controller.rest.config import" in (tree / "controller" / "rest" / "kubeconfig.py").read_text()
    )
    plant(tree / "controller" / "rest" / "config.py", "import controller.rest.kubeconfig  # noqa")
    result = lint(tree)
    assert result.returncode != 0
    assert any("cycle" in name.lower() for name in broken(result)), result.stdout


def test_a_renamed_layer_fails_the_run_instead_of_dropping_out(tree: Path) -> None:
    (tree / "controller" / "gc").rename(tree / "controller" / "garbage")
    result = lint(tree)
    assert result.returncode != 0, result.stdout


def layer_names(contract: str) -> set[str]:
    """The modules a layers contract of .importlinter names, as written."""
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    lines = config[f"importlinter:contract:{contract}"]["layers"].splitlines()
    return {name.strip() for line in lines for name in line.replace(":", "|").split("|") if name.strip()}


def children_of(package: Path) -> set[str]:
    return {m.name for m in pkgutil.iter_modules([str(package)]) if m.name != "__main__"}


def test_every_module_and_package_of_the_controller_has_a_floor() -> None:
    """A new top-level module or package outside the layers would be bound by no contract."""
    assert layer_names("layers") == {f"controller.{name}" for name in children_of(REPO / "controller")}


def test_every_module_of_the_job_controller_has_a_floor() -> None:
    assert layer_names("torchrunjob") == children_of(REPO / "controller" / "torchrunjob")


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("manifests/worker.py", "controller.torchrunjob.status"),
        ("status.py", "controller.torchrunjob.workers"),
    ],
)
def test_a_job_controller_module_importing_a_floor_above_breaks_a_contract(
    tree: Path, module: str, imported: str
) -> None:
    plant(tree / "controller" / "torchrunjob" / module, f"import {imported}  # noqa")
    result = lint(tree)
    assert result.returncode != 0
    assert any("job controller's floors" in name for name in broken(result)), result.stdout
