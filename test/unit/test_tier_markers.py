"""The tier markers have one home, test/conftest.py (by directory): a module that marks itself
`integration`, `e2e` or `realnode` says something the directory already says, and a marker set by
hand is one a moved or new module can get wrong or forget."""

from __future__ import annotations

import ast
from pathlib import Path

TEST_DIR = Path(__file__).resolve().parents[1]


def conftest_tiers() -> set[str]:
    """The tier markers test/conftest.py sets (its `TIERS`), read without importing it."""
    tree = ast.parse((TEST_DIR / "conftest.py").read_text())
    (value,) = (
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["TIERS"]
    )
    return set(ast.literal_eval(value))


TIERS = conftest_tiers()


def tier_marks(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, marker) of every `pytest.mark.<tier>` in a module: `pytestmark`, decorators, params."""
    return [
        (node.lineno, node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in TIERS
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    ]


def test_no_test_module_sets_a_tier_marker_itself() -> None:
    found = [
        f"{path.relative_to(TEST_DIR)}:{line} pytest.mark.{mark}"
        for path in sorted(TEST_DIR.rglob("test_*.py"))
        for line, mark in tier_marks(ast.parse(path.read_text(), str(path)))
    ]
    assert not found, "test/conftest.py marks the tiers by directory: remove these"


def test_a_tier_marker_set_by_hand_is_found() -> None:
    sample = "import pytest\npytestmark = pytest.mark.integration\n\n@pytest.mark.e2e\ndef test_x(): ...\n"
    assert tier_marks(ast.parse(sample)) == [(2, "integration"), (4, "e2e")]
    assert tier_marks(ast.parse("import pytest\npytestmark = pytest.mark.timeout(60)\n")) == []
