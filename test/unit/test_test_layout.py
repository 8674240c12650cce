"""The tests' own rules, checked on their source: one home per shared helper, and no test module
importing another (a helper imported from a test module ties two modules together, and the tests
of the imported one can run, or be collected, again under the importer)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import testbed
from testbed import wait_until

TEST_DIR = Path(__file__).resolve().parents[1]
SHARED = {"wait_until": TEST_DIR / "testbed.py", "condition": TEST_DIR / "testbed.py"}  # helper: its home


def modules() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(TEST_DIR.rglob("*.py"))}


def test_no_test_module_imports_another() -> None:
    found = []
    for path, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [f"{path.relative_to(TEST_DIR)}: {name}" for name in names if name.startswith("test_")]
    assert not found, (
        "move what they share into a helper module (test/testbed.py, test/integration/jobs.py, ...)"
    )


def test_a_shared_helper_is_defined_only_in_its_home() -> None:
    found = [
        f"{path.relative_to(TEST_DIR)}:{node.lineno} {node.name}"
        for path, tree in modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and SHARED.get(node.name, path) != path
    ]
    assert not found, f"import these from their home instead: {SHARED}"


def test_wait_until_polls_at_once_then_backs_off_to_its_interval_and_returns_the_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first polls come 1 ms apart, doubling up to `interval`: a unit test waiting for a thread
    is not held up by the control plane's polling interval, and the control plane is not polled
    every millisecond."""
    pauses: list[float] = []
    monkeypatch.setattr(testbed.time, "sleep", pauses.append)
    calls = iter(range(1, 100))
    assert wait_until(lambda: next(calls) == 10 and "ready", 5, interval=0.05) == "ready"
    assert pauses == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05, 0.05])
