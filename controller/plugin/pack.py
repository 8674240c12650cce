"""The packer's first half: which files of a project go into its workspace, and whether to refuse.

`scan(root)` walks the project once and returns a `Tree`: the entries to pack (sorted by path,
so nothing depends on the order the file system lists them), what the ignore rules dropped and
by which rule, what cannot be packed (sockets, devices), symlinks that leave the tree and files
that look like secrets. It reads only metadata and each file's first bytes.

`refusals(tree, limit, force)` turns a tree into the reasons not to send it, each a few lines a
person can act on: a symlink leaving the tree is always refused (the sync program would refuse
the archive anyway); secrets and a total over `limit` are refused unless `force`, listing the
largest files and the `.torchrunignore` line that would drop each. Nothing is sent before this
answers, so a refusal costs nothing. Writing the archive is `controller.plugin.archive`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from controller.plugin.ignore import IgnoreRules, Rule
from controller.plugin.secretfiles import HEAD_BYTES, secret_reason
from controller.sync.names import RESERVED_TOP_LEVEL

NEVER_PACKED = ".git"
DEFAULT_SIZE_LIMIT = 512 * 1024 * 1024
_LARGEST_SHOWN = 10


@dataclass(frozen=True)
class Entry:
    """One thing to pack: a regular file, a directory or a symlink that stays inside the tree."""

    path: str  # POSIX, relative to the root
    kind: str  # "file", "dir" or "symlink"
    mode: int  # permission bits
    size: int = 0
    link: str = ""  # a symlink's target, relative


@dataclass(frozen=True)
class Tree:
    """What `scan` found under `root`."""

    root: Path
    entries: tuple[Entry, ...]
    ignored: tuple[tuple[str, Rule], ...] = ()
    unpackable: tuple[str, ...] = ()
    escaping_links: tuple[tuple[str, str], ...] = ()
    secrets: tuple[tuple[str, str], ...] = ()
    reserved: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.kind == "file")

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)


@dataclass
class _Walk:
    root: Path
    entries: list[Entry] = field(default_factory=list)
    ignored: list[tuple[str, Rule]] = field(default_factory=list)
    unpackable: list[str] = field(default_factory=list)
    escaping: list[tuple[str, str]] = field(default_factory=list)
    secrets: list[tuple[str, str]] = field(default_factory=list)


def list_dir(directory: Path) -> list[os.DirEntry[str]]:
    """The directory's entries in whatever order the file system gives (tests swap this)."""
    with os.scandir(directory) as it:
        return list(it)


def _link_target(root: Path, path: Path, rel: str) -> str | None:
    """The symlink's target relative to its own directory if it stays inside `root`, else None."""
    target = os.readlink(path)
    absolute = Path(os.path.normpath(path.parent / target))
    try:
        absolute.relative_to(root)
    except ValueError:
        return None
    real = Path(os.path.realpath(path))
    if real != absolute and not _inside(real, Path(os.path.realpath(root))):
        return None  # a link through another link that leaves
    return os.path.relpath(absolute, path.parent) if os.path.isabs(target) else target


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(HEAD_BYTES)


def _visit(walk: _Walk, rules: IgnoreRules, directory: Path, prefix: str) -> None:
    for item in sorted(list_dir(directory), key=lambda e: e.name):
        rel = prefix + item.name
        path = directory / item.name
        st = os.lstat(path)
        is_dir = stat.S_ISDIR(st.st_mode)
        if is_dir and item.name == NEVER_PACKED:
            continue
        verdict = rules.check(rel, is_dir)
        if verdict.ignored:
            assert verdict.rule is not None
            walk.ignored.append((rel, verdict.rule))
            continue
        mode = stat.S_IMODE(st.st_mode)
        if is_dir:
            walk.entries.append(Entry(rel, "dir", mode))
            _visit(walk, rules.descend(path, rel), path, rel + "/")
        elif stat.S_ISLNK(st.st_mode):
            target = _link_target(walk.root, path, rel)
            if target is None:
                walk.escaping.append((rel, os.readlink(path)))
            else:
                walk.entries.append(Entry(rel, "symlink", 0o777, link=target))
        elif stat.S_ISREG(st.st_mode):
            walk.entries.append(Entry(rel, "file", mode, size=st.st_size))
            reason = secret_reason(rel, _head(path))
            if reason:
                walk.secrets.append((rel, reason))
        else:
            walk.unpackable.append(rel)


def scan(root: Path) -> Tree:
    """Walk `root` (not following symlinks) and sort what it holds; see the module docstring."""
    root = Path(os.path.abspath(root))
    walk = _Walk(root=root)
    _visit(walk, IgnoreRules.for_root(root), root, "")
    entries = tuple(sorted(walk.entries, key=lambda e: e.path))
    return Tree(
        root=root,
        entries=entries,
        ignored=tuple(walk.ignored),
        unpackable=tuple(walk.unpackable),
        escaping_links=tuple(walk.escaping),
        secrets=tuple(walk.secrets),
        reserved=tuple(e.path for e in entries if e.path in RESERVED_TOP_LEVEL),
    )


def human_size(n: float) -> str:
    """`1.5 MB` style, powers of 1024 with the short names people read them as."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def drop_rule(path: str) -> str:
    """The `.torchrunignore` line (in the project's root) that drops `path`: its top directory,
    or the file itself."""
    parts = PurePosixPath(path).parts
    return f"/{parts[0]}/" if len(parts) > 1 else f"/{parts[0]}"


def _largest(tree: Tree) -> Iterator[str]:
    for e in sorted(tree.files, key=lambda e: (-e.size, e.path))[:_LARGEST_SHOWN]:
        yield f"  {human_size(e.size):>10}  {e.path}   (drop it: `{drop_rule(e.path)}` in .torchrunignore)"


def refusals(tree: Tree, limit: int = DEFAULT_SIZE_LIMIT, force: bool = False) -> list[str]:
    """Why `tree` must not be sent, as printable blocks (empty: send it). See the module doc."""
    out: list[str] = []
    if tree.escaping_links:
        links = "\n".join(f"  {p} -> {t}" for p, t in tree.escaping_links)
        out.append(
            f"symlinks leave the project (the sync program refuses them); ignore or replace them:\n{links}"
        )
    if tree.reserved:
        out.append(f"{', '.join(tree.reserved)}: reserved name of the workspace marker; rename it")
    if tree.secrets and not force:
        lines = "\n".join(
            f"  {p}: {why}   (drop it with `{drop_rule(p)}` in .torchrunignore)" for p, why in tree.secrets
        )
        out.append(f"files that look like secrets (--force sends them anyway):\n{lines}")
    if tree.total_bytes > limit and not force:
        out.append(
            f"the workspace holds {human_size(tree.total_bytes)} in {len(tree.files)} files, over the "
            f"{human_size(limit)} limit (--force sends it anyway); largest files:\n"
            + "\n".join(_largest(tree))
        )
    return out
