"""Which files of a project stay out of its workspace archive: git's ignore rules, without git.

Guarantees, matching git's own reading of `.gitignore` (gitignore(5)):
  * every directory's `.gitignore` and `.torchrunignore` apply, their rules read together
    (`.gitignore` first, so a `.torchrunignore` line can re-include with `!` what `.gitignore`
    dropped, and the reverse is not possible);
  * a rule is scoped to the directory of its file: `/build` or `a/b` are anchored there, a name
    without a slash matches at any depth below it;
  * the deepest file with a matching rule decides, and inside one file the last matching line
    wins (so `!keep.log` after `*.log` re-includes);
  * a dropped directory is not entered, so nothing below it can be re-included (git's rule too);
  * the defaults (`__pycache__/`, `.venv/`, `venv/`, `*.pyc`) rank below every file, so a
    project may re-include them with `!`; `.git/` is never packed and is not a rule here.

Matching is `pathspec`'s GitIgnoreSpec (gitwildmatch with git's precedence), so `**`, character
classes, trailing-slash directory rules and escapes behave as git's do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pathspec

IGNORE_FILES = (".gitignore", ".torchrunignore")
DEFAULT_RULES = ("__pycache__/", ".venv/", "venv/", "*.pyc")
DEFAULTS_SOURCE = "built-in defaults"


@dataclass(frozen=True)
class Rule:
    """One ignore line and where it was written (`sub/.gitignore:3`, or the defaults)."""

    source: str
    pattern: str

    def __str__(self) -> str:
        return f"{self.source}: {self.pattern}"


@dataclass(frozen=True)
class Verdict:
    """Whether a path is dropped, and the rule that decided (None when no rule matched)."""

    ignored: bool
    rule: Rule | None


@dataclass(frozen=True)
class _Level:
    """The rules of one directory (`prefix` is its path from the root, with a trailing slash)."""

    prefix: str
    spec: pathspec.GitIgnoreSpec
    rules: tuple[Rule, ...]

    def check(self, rel_path: str) -> Verdict | None:
        result = self.spec.check_file(rel_path[len(self.prefix) :])
        if result.include is None or result.index is None:
            return None
        return Verdict(ignored=result.include, rule=self.rules[result.index])


def _level(prefix: str, lines: Sequence[tuple[str, str]]) -> _Level | None:
    """A level from `(source, line)` pairs; blank lines and comments carry no rule."""
    kept = [(src, line.rstrip("\n")) for src, line in lines]
    kept = [(src, line) for src, line in kept if line.strip() and not line.startswith("#")]
    if not kept:
        return None
    spec = pathspec.GitIgnoreSpec.from_lines([line for _, line in kept])
    rules = tuple(Rule(src, line.strip()) for src, line in kept)
    return _Level(prefix=prefix, spec=spec, rules=rules)


def _read_level(directory: Path, prefix: str) -> _Level | None:
    lines: list[tuple[str, str]] = []
    for name in IGNORE_FILES:
        path = directory / name
        if path.is_file() and not path.is_symlink():
            text = path.read_text(encoding="utf-8", errors="replace")
            lines += [(f"{prefix}{name}:{n}", line) for n, line in enumerate(text.splitlines(), 1)]
    return _level(prefix, lines)


@dataclass(frozen=True)
class IgnoreRules:
    """The rules in force inside one directory: its own and every ancestor's, deepest last."""

    levels: tuple[_Level, ...]

    @classmethod
    def for_root(cls, root: Path, defaults: Sequence[str] = DEFAULT_RULES) -> IgnoreRules:
        """The defaults plus the root directory's ignore files."""
        levels = [_level("", [(DEFAULTS_SOURCE, d) for d in defaults]), _read_level(root, "")]
        return cls(tuple(level for level in levels if level is not None))

    def descend(self, directory: Path, rel_dir: str) -> IgnoreRules:
        """The rules inside `directory` (at `rel_dir` from the root): these plus its own files."""
        level = _read_level(directory, rel_dir.rstrip("/") + "/")
        return self if level is None else IgnoreRules((*self.levels, level))

    def check(self, rel_path: str, is_dir: bool) -> Verdict:
        """Whether `rel_path` (POSIX, relative to the root) is dropped, and by which rule."""
        path = rel_path + "/" if is_dir else rel_path
        for level in reversed(self.levels):
            verdict = level.check(path)
            if verdict is not None:
                return verdict
        return Verdict(ignored=False, rule=None)
