"""Fuzzing the archive validator: random tar structures and random bytes.

Whatever the input, publishing it as a generation either succeeds or raises `SyncError` (nothing
else escapes), writes nothing outside the workspace, leaves no temp dir, and a published tree
has no symlink that really resolves outside it. The suite runs a few examples;
`SYNC_FUZZ_EXAMPLES=20000` runs a long campaign.
"""

from __future__ import annotations

import gzip
import io
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st
from sync_archives import Entry, good_archive, tar

from controller.sync.archive import extract_archive
from controller.sync.errors import SyncError
from controller.sync.generations import publish
from controller.sync.layout import CURRENT_LOCK
from controller.sync.limits import Limits, Stats

EXAMPLES = int(os.environ.get("SYNC_FUZZ_EXAMPLES", "40"))
ESCAPE = "@ESCAPE@"  # replaced by the sandbox's "escape" directory, next to the workspace
LIMITS = Limits(max_bytes=64 * 1024, max_files=64)

# benign components weigh more, so that many archives pass and the published trees get checked
component = st.sampled_from(
    ["a", "b", "c.py", "a", "b", "c.py", "..", ".", "", ".sync_success", "d" * 120, "é", ESCAPE]
)
path = st.lists(component, min_size=1, max_size=4).map("/".join)
name = st.one_of(path, path, path, path.map(lambda p: "./" + p), path.map(lambda p: "/" + p))
entry = st.builds(
    Entry,
    name=name,
    kind=st.sampled_from(["file", "file", "dir", "symlink", "hardlink", "chr", "blk", "fifo"]),
    data=st.binary(max_size=64),
    target=st.one_of(name, st.just(ESCAPE + "/x"), st.just("../escape/x")),
    mode=st.integers(0, 0o7777),
)
entries = st.lists(entry, max_size=10)

# names that pass on their own, links in every direction: most archives publish, and the
# published trees' links are what gets checked
plain_path = st.lists(st.sampled_from(["a", "b", "c.py"]), min_size=1, max_size=3).map("/".join)
link_target = st.lists(st.sampled_from(["a", "b", "c.py", "..", "."]), min_size=1, max_size=4).map("/".join)
linked_entry = st.builds(
    Entry,
    name=plain_path,
    kind=st.sampled_from(["file", "dir", "symlink", "symlink", "hardlink"]),
    data=st.binary(max_size=8),
    target=link_target,
)


def placed(entries: list[Entry], escape: Path) -> list[Entry]:
    return [
        Entry(
            e.name.replace(ESCAPE, str(escape)), e.kind, e.data, e.target.replace(ESCAPE, str(escape)), e.mode
        )
        for e in entries
    ]


def build(entries: list[Entry], fmt: int) -> bytes:
    try:
        return tar(entries, fmt)
    except (ValueError, OSError, UnicodeError):
        reject()  # tarfile's writer cannot express it; nothing to test


def check_publish(make: Callable[[Path], bytes], compression: str = "gz") -> None:
    """Publish `make(escape_dir)` in a fresh sandbox; check the guarantees of the module docstring."""
    with tempfile.TemporaryDirectory(prefix="sync-fuzz-") as tmp:
        sandbox = Path(tmp)
        (sandbox / "escape").mkdir()
        workspace = sandbox / "ws"
        data = make(sandbox / "escape")

        def fill(dest: Path) -> Stats:
            return extract_archive(io.BytesIO(data), dest, LIMITS, compression=compression)

        try:
            publish(workspace, 0, fill, source="fuzz")
            published = True
            event("published")
        except SyncError as e:
            published = False
            event(f"{e.reason}: {e.message.split(' ', 1)[0]}")
        assert sorted(os.listdir(sandbox)) == ["escape", "ws"]
        assert os.listdir(sandbox / "escape") == []
        left = set(os.listdir(workspace / "generations")) - {CURRENT_LOCK}
        assert left == ({"0"} if published else {"0.failed"})
        if published:
            assert_links_inside(workspace / "generations" / "0")


def assert_links_inside(root: Path) -> None:
    real_root = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            if os.path.islink(p):
                resolved = os.path.realpath(p)
                assert resolved == real_root or resolved.startswith(real_root + os.sep), (p, resolved)


fuzz = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@fuzz
@given(entries=entries, fmt=st.sampled_from([0, 1, 2]), compressed=st.booleans())
def test_random_tar_structures(entries: list[Entry], fmt: int, compressed: bool) -> None:
    def make(escape: Path) -> bytes:
        raw = build(placed(entries, escape), fmt)
        return gzip.compress(raw) if compressed else raw

    check_publish(make, "gz" if compressed else "none")


@fuzz
@given(
    entries=entries,
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
    compress_after=st.booleans(),
)
def test_mutated_bytes(
    entries: list[Entry], edits: list[tuple[int, int]], cut: int | None, compress_after: bool
) -> None:
    """Flip bytes in the tar (then compress), or in the compressed stream; maybe truncate."""

    def make(escape: Path) -> bytes:
        raw = bytearray(build(placed(entries, escape), 2) if entries else good_archive())
        if not compress_after and entries:
            raw = bytearray(gzip.compress(bytes(raw)))
        for where, value in edits:
            raw[where % len(raw)] = value
        if cut is not None:
            del raw[cut % (len(raw) + 1) :]
        return gzip.compress(bytes(raw)) if compress_after else bytes(raw)

    check_publish(make)


@fuzz
@given(entries=st.lists(linked_entry, max_size=8, unique_by=lambda e: e.name))
def test_links_in_plain_trees(entries: list[Entry]) -> None:
    check_publish(lambda _: gzip.compress(build(entries, 2)))


@fuzz
@given(data=st.binary(max_size=4096))
def test_random_bytes(data: bytes) -> None:
    check_publish(lambda _: data)
    check_publish(lambda _: gzip.compress(data))
