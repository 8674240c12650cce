"""Entry names and symlink targets, judged as text."""

from __future__ import annotations

import pytest

from controller.sync.errors import SyncError
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


@pytest.mark.parametrize(("link", "target"), [("a", "b"), ("d/a", "../b"), ("d/e/a", "../../d"), ("a", ".")])
def test_symlink_inside(link: str, target: str) -> None:
    symlink_target(tuple(link.split("/")), target, link)


@pytest.mark.parametrize(
    ("link", "target", "fragment"),
    [("a", "..", "leaves"), ("d/a", "../../b", "leaves"), ("a", "/etc", "absolute"), ("a", "", "empty")],
)
def test_symlink_refused(link: str, target: str, fragment: str) -> None:
    with pytest.raises(SyncError, match=fragment):
        symlink_target(tuple(link.split("/")), target, link)
