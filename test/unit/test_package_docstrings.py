"""Every package's docstring is its table of contents: it names each of its modules and
subpackages, and no module or subpackage that is not there (a move that forgets the docstring
leaves a reader looking in the wrong folder).

A module `name` is named as `name.py` or `` `name` `` (or by a dotted use, `` `name.Thing` ``), a
subpackage as `name/` or `` `name` ``; `__main__.py` is named by the package's `python -m`. What is
checked the other way: a bare `name.py` or `name/` (no folder or package before it) must be one
of this package's, and a listing's entry — a backticked `` `name` `` followed by `:` or ` (` —
that is a module or subpackage somewhere else in `controller` but not here is one that moved.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import controller

ROOT = Path(controller.__file__).resolve().parent
PACKAGES = sorted(p.parent for p in ROOT.rglob("__init__.py"))


def dotted(package: Path) -> str:
    return ".".join(("controller", *package.relative_to(ROOT).parts))


def members(package: Path) -> tuple[set[str], set[str]]:
    """The package's modules (by stem, `__init__` and `__main__` aside) and its subpackages."""
    modules = {p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")}
    subpackages = {p.parent.name for p in package.glob("*/__init__.py")}
    return modules, subpackages


def docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


ALL_NAMES = {name for package in PACKAGES for group in members(package) for name in group}


def named(doc: str, name: str, *, subpackage: bool) -> bool:
    forms = [rf"`{name}(\.\w+)*`", rf"`{name}\.\w"]
    forms.append(rf"(?<![\w/.-]){name}/" if subpackage else rf"(?<![\w/.-]){name}\.py\b")
    return any(re.search(form, doc) for form in forms)


def stale(doc: str, package: Path) -> set[str]:
    modules, subpackages = members(package)
    files = set(re.findall(r"(?<![\w/.-])([A-Za-z_]\w*)\.py\b", doc))
    folders = set(re.findall(r"(?<![\w/.-])([a-z_]\w*)/(?![\w/])", doc))
    quoted = set(re.findall(r"`([a-z_]\w*)`(?=:| \()", doc)) & ALL_NAMES  # a listing's entry
    return (files - modules - {"__main__"}) | (folders - subpackages) | (quoted - modules - subpackages)


@pytest.mark.parametrize("package", PACKAGES, ids=dotted)
def test_a_package_docstring_names_each_of_its_modules_and_subpackages(package: Path) -> None:
    doc = docstring(package)
    modules, subpackages = members(package)
    missing = sorted(m for m in modules if not named(doc, m, subpackage=False))
    missing += sorted(f"{s}/" for s in subpackages if not named(doc, s, subpackage=True))
    if (package / "__main__.py").exists() and f"python -m {dotted(package)}" not in doc:
        missing.append("__main__.py")
    assert not missing, f"{dotted(package)}'s docstring does not name {missing}"


@pytest.mark.parametrize("package", PACKAGES, ids=dotted)
def test_a_package_docstring_names_nothing_that_is_not_there(package: Path) -> None:
    lacks = sorted(stale(docstring(package), package))
    assert not lacks, f"{dotted(package)}'s docstring names {lacks}, which it lacks"


def test_the_check_sees_a_module_missing_and_one_that_moved(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for path in ("__init__.py", "a.py", "b.py", "sub/__init__.py"):
        (package / path).write_text("")
    doc = "The package: `a` and sub/; b.py once moved here, c.py did not, nor `workqueue` (gone)."
    assert named(doc, "a", subpackage=False)
    assert named(doc, "sub", subpackage=True)
    assert stale(doc, package) == {"c", "workqueue"}
    assert not named("`ab` and xb.py", "b", subpackage=False)
