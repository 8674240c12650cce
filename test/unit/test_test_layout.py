"""The tests' own rules: one home per shared helper, no test module importing another (a helper
imported from a test module ties two modules together, and the tests of the imported one can run,
or be collected, again under the importer), and tiers a marker can select: `-m "not integration"`
runs the unit tests and nothing else."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
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


COLLECTED = """
import json, os

DESELECTED = {}

def marks(item):
    # an xdist_group or real_node marker with what it names: `xdist_group=<name>`, `real_node=<N>`
    named = ("xdist_group", "real_node")
    names = {
        "=".join([m.name, *map(str, m.args)]) if m.name in named else m.name for m in item.iter_markers()
    }
    return sorted(names)

def pytest_deselected(items):
    DESELECTED.update((i.nodeid, marks(i)) for i in items)

def pytest_collection_finish(session):
    selected = {i.nodeid: marks(i) for i in session.items}
    with open(os.environ["COLLECTED_INTO"], "w") as out:
        json.dump({"selected": selected, "deselected": DESELECTED}, out)
"""


def collect(tmp_path: Path, marker_expression: str) -> dict[str, dict[str, list[str]]]:
    """What `pytest --collect-only -m EXPRESSION test` selects and deselects: each test's markers by
    its node id."""
    (tmp_path / "collected_plugin.py").write_text(COLLECTED)
    into = tmp_path / "collected.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "COLLECTED_INTO": str(into)}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "collected_plugin"]
    done = subprocess.run(
        [*command, "--collect-only", "-q", "-m", marker_expression, "test"],
        cwd=TEST_DIR.parent, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    collected: dict[str, dict[str, list[str]]] = json.loads(into.read_text())
    return collected


def test_the_tiers_are_marked_by_directory_and_not_integration_is_the_unit_tests_alone(
    tmp_path: Path,
) -> None:
    collected = collect(tmp_path, "not integration")
    everything = collected["selected"] | collected["deselected"]
    tier = {d: {n for n in everything if n.startswith(f"test/{d}/")} for d in ("unit", "integration", "e2e")}
    assert all(tier.values()) and set(everything) == set().union(*tier.values())
    assert set(collected["selected"]) == tier["unit"]

    def marked(marker: str) -> set[str]:
        return {n for n, marks in everything.items() if marker in marks}

    assert marked("integration") == tier["integration"] | tier["e2e"]
    assert marked("e2e") == tier["e2e"]
    assert marked("realnode") == {n for n in tier["e2e"] if n.startswith("test/e2e/test_realnode")}
    assert marked("realnode")

    # hack/test.sh's workers (`--dist loadgroup`): the real-node tests of each node in one group
    # (`real_node=N`, 0 unmarked), so one worker runs them one after another and two nodes run on
    # two; each other control-plane module a group of its own (its module-scoped fixtures set up
    # once); unit tests in none (any worker)
    def groups(node: str) -> list[str]:
        return [m.removeprefix("xdist_group=") for m in everything[node] if m.startswith("xdist_group=")]

    def real_node(node: str) -> str:
        return next(
            (m.removeprefix("real_node=") for m in everything[node] if m.startswith("real_node=")), "0"
        )

    real = marked("realnode")
    node = real_node if testbed.TWO_REAL_NODES else (lambda n: "0")
    assert {n: groups(n) for n in real} == {n: [f"realnode-{node(n)}"] for n in real}
    assert {real_node(n) for n in real} == {"0", "1"}
    # only node 0 runs kube-proxy: the Service tests run there
    services = {n for n in real if n.startswith("test/e2e/test_realnode_progress_service.py")}
    assert services and {real_node(n) for n in services} == {"0"}
    others = marked("integration") - marked("realnode")
    assert {n: groups(n) for n in others} == {n: [n.split("::")[0].removeprefix("test/")] for n in others}
    assert not any(groups(n) for n in tier["unit"])


def test_the_real_node_tests_come_first_each_in_its_order(tmp_path: Path) -> None:
    """hack/test.sh's workers start the groups in the order of their first test
    (`--no-loadscope-reorder`): the real nodes' chains, the longest, must lead the collection, and
    within them the file's own order is kept (a node's down test stays its last)."""
    order = list(collect(tmp_path, "integration")["selected"])
    real = [n for n in order if n.startswith("test/e2e/test_realnode")]
    assert real and order[: len(real)] == real
    in_file = [n.split("::")[1].split("[")[0] for n in real if n.startswith("test/e2e/test_realnode.py::")]
    source = (TEST_DIR / "e2e" / "test_realnode.py").read_text()
    defined = {name: i for i, name in enumerate(re.findall(r"^def (test_\w+)", source, re.M))}
    assert [defined[n] for n in in_file] == sorted(defined[n] for n in in_file)
    assert in_file[-1] == "test_down_stops_the_real_node_and_leaves_the_host_as_it_found_it"
