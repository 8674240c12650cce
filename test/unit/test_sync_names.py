"""Entry names and symlink targets, judged as text."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.sync.errors import INVALID_ARCHIVE, SyncError
from controller.sync.names import check_reserved, normalize, symlink_target


@pytest.mark.parametrize(
    ("name", "parts"),
    [("a", ("a",)), ("./a//b/", ("a", "b")), (".", ()), ("./", ()), ("a/./b", ("a", "b")), ("..a", ("..a",))],
)
def test_normalize(name: str, parts: tuple[str, ...]) -> None:
    assert normalize(name) == parts


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("/a", "absolute"),
        ("//a", "absolute"),
        ("..", "traversal"),
        ("a/../..", "traversal"),
        ("a\x00b", "NUL"),
    ],
)
def test_normalize_refuses(name: str, fragment: str) -> None:
    with pytest.raises(SyncError, match=fragment):
        normalize(name)


def test_reserved_marker_only_at_the_top() -> None:
    check_reserved(("sub", ".sync_success"), "sub/.sync_success")
    for parts in [(".sync_success",), (".sync_success", "a")]:
        with pytest.raises(SyncError, match="reserved"):
            check_reserved(parts, "/".join(parts))


INSIDE = [("a", "b"), ("d/a", "../b"), ("d/e/a", "../../d"), ("a", "."), ("d/a", "x/../../y"), ("d/a", "..")]
OUTSIDE = [
    ("a", ".."),
    ("d/a", "../../b"),
    ("d/e/a", "../../.."),
    ("d/a", "x/../../../b"),
    ("a", "b/../../c"),
]


@pytest.mark.parametrize(("link", "target"), INSIDE + OUTSIDE)
def test_a_symlink_is_accepted_exactly_when_on_disk_it_resolves_inside_the_tree(
    link: str, target: str, tmp_path: Path
) -> None:
    """The lexical judgement agrees with the filesystem: the link made for real in a tree with no
    other links resolves inside the tree exactly when `symlink_target` accepts it."""
    root = tmp_path.resolve() / "tree"
    path = root / link
    path.parent.mkdir(parents=True)
    os.symlink(target, path)
    inside = Path(os.path.realpath(path)).is_relative_to(root)
    try:
        symlink_target(tuple(link.split("/")), target, link)
        accepted = True
    except SyncError as refused:
        assert refused.reason == INVALID_ARCHIVE and "leaves the tree" in str(refused)
        accepted = False
    assert accepted == inside
    assert inside == ((link, target) in INSIDE)  # the table's two halves say what they are


@pytest.mark.parametrize(
    ("link", "target", "fragment"),
    [("a", "/etc", "absolute"), ("a", "", "empty"), ("a", "b\x00c", "invalid")],
)
def test_an_absolute_or_empty_symlink_target_is_refused(link: str, target: str, fragment: str) -> None:
    with pytest.raises(SyncError, match=fragment) as refused:
        symlink_target(tuple(link.split("/")), target, link)
    assert refused.value.reason == INVALID_ARCHIVE
