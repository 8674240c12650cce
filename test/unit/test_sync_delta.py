"""The delta exchange: the manifest's checks, the chunks, the plan, and both halves over pipes
(the plugin's `controller.plugin.delta` against the sync program's `receive_delta`)."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.plugin.archive import write_archive
from controller.plugin.delta import Answer, parse_answer, tree_manifest, write_payload
from controller.plugin.pack import scan
from controller.sync import chunks, layout
from controller.sync.delta import SIZE_DIGITS, BaseFile, plan, receive_delta
from controller.sync.errors import SyncError
from controller.sync.generations import read_failure, read_marker
from controller.sync.limits import Limits
from controller.sync.manifest import DIR, FILE, SYMLINK, ManifestEntry, decode, digest, encode, manifest_of
from controller.sync.upload import receive

SHA = "ab" * 32


def entry(path: str, kind: str = FILE, **kw: object) -> list[object]:
    modes = {FILE: 0o644, DIR: 0o755, SYMLINK: 0o777}
    e = {
        "mode": modes[kind],
        "size": 1 if kind == FILE else 0,
        "sha": SHA if kind == FILE else "",
        "link": "",
    }
    e.update(kw)
    return [path, kind, e["mode"], e["size"], e["sha"], e["link"]]


def manifest(*entries: list[object]) -> bytes:
    return json.dumps({"version": 1, "entries": list(entries)}).encode()


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ([entry("/etc/passwd")], "absolute path"),
        ([entry("a", DIR), entry("a/../../x")], "path traversal"),
        ([entry("./a")], "not canonical"),
        ([entry("b"), entry("a")], "out of order"),
        ([entry("a"), entry("a")], "out of order"),
        ([entry("d/a")], "not under a listed directory"),
        ([entry("a"), entry("a/b")], "not under a listed directory"),
        ([entry(".sync_success")], "reserved name"),
        ([entry("l", SYMLINK, link="../../etc")], "leaves the tree"),
        ([entry("l", SYMLINK, link="/etc")], "absolute target"),
        ([entry("a", mode=0o4755)], "mode"),
        ([entry("a", sha="zz")], "needs a size and a SHA-256"),
        ([entry("a", DIR, size=3)], "has data but is no file"),
        ([], "empty manifest"),
    ],
)
def test_the_manifest_refuses_what_an_archive_member_would_be_refused_for(
    entries: list[list[object]], why: str
) -> None:
    with pytest.raises(SyncError, match=why):
        decode(manifest(*entries), Limits())


def test_the_manifest_is_charged_to_the_limits() -> None:
    with pytest.raises(SyncError, match="ArchiveTooLarge"):
        decode(manifest(entry("a", size=10), entry("b", size=10)), Limits(max_bytes=15))
    with pytest.raises(SyncError, match="ArchiveTooLarge"):
        decode(manifest(entry("a"), entry("b"), entry("c")), Limits(max_files=2))


def text(lines: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    return b"".join(f"x_{i} = {rng.random()!r}  # {rng.randrange(10**9)}\n".encode() for i in range(lines))


def rebuild(ops: bytes, old: bytes) -> bytes:
    spans = chunks.spans(old)
    stream = io.BytesIO(ops)
    out = b""
    while True:
        tag, value = chunks.read_op(stream)
        if tag == chunks.END:
            return out
        if tag == chunks.COPY:
            offset, length = spans[value]
            out += old[offset : offset + length]
        else:
            out += chunks.read_exactly(stream, value)


def test_a_one_line_edit_resends_about_one_chunk_wherever_it_moves_the_rest() -> None:
    old = text(1500)
    lines = old.splitlines(keepends=True)
    new = b"".join([*lines[:700], b"inserted = 'a longer line than before'\n", *lines[701:]])
    ops = b"".join(chunks.delta_ops(new, chunks.chunk_ids(old)))
    assert rebuild(ops, old) == new
    assert len(old) > 50_000 and len(ops) < 3 * chunks.MIN_CHUNK * 8  # a few chunks, not the file
    assert all(n <= chunks.MAX_CHUNK for _, n in chunks.spans(os.urandom(300_000)))


def test_the_plan_takes_content_from_any_path_and_rebuilds_changed_files_from_the_same_path() -> None:
    entries = [
        ManifestEntry("a", FILE, 0o644, 3, "1" * 64),
        ManifestEntry("b", FILE, 0o644, 3, "2" * 64),
        ManifestEntry("c", FILE, 0o644, 3, "3" * 64),
        ManifestEntry("d", DIR, 0o755),
    ]
    moved = BaseFile("old/a", 3, 0o644)
    same_path = BaseFile("b", 9, 0o644)
    chosen = plan(entries, {"1" * 64: moved}, {"b": same_path})
    assert (chosen.reuse, chosen.want, chosen.rebuild_from) == ({0: moved}, [1, 2], {1: same_path})


def test_the_plugin_refuses_an_answer_beyond_the_files_of_its_manifest() -> None:
    entries = [ManifestEntry("d", DIR, 0o755), ManifestEntry("d/a", FILE, 0o644, 1, SHA)]
    assert parse_answer(b'{"base":0,"want":[[1,null]]}', entries) == Answer(0, ((1, None),))
    assert parse_answer(b'{"base":null}', entries) == Answer(None)
    for bad in (
        b'{"base":0,"want":[[0,null]]}',  # a directory
        b'{"base":0,"want":[[2,null]]}',  # out of range
        b'{"base":0,"want":[[1,null],[1,null]]}',  # twice
        b'{"base":0,"want":[[-1,null]]}',
        b'{"base":0,"want":[[1,["../../etc/passwd"]]]}',
        b'{"base":"0","want":[]}',
    ):
        with pytest.raises(ValueError):
            parse_answer(bad, entries)


# --- both halves over pipes ---------------------------------------------------------------------


def project(root: Path, files: int = 20) -> None:
    (root / "pkg").mkdir(parents=True)
    for i in range(files):
        (root / "pkg" / f"m{i}.py").write_bytes(text(300, seed=i))
    (root / "train.py").write_bytes(text(2000, seed=99))
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("pkg/m0.py")


def publish_full(workspace: Path, root: Path, generation: int) -> None:
    """What `receive` publishes from the plugin's archive of `root` (the full upload)."""
    buf = io.BytesIO()
    archive = write_archive(scan(root), buf)
    r, w = os.pipe()
    feeder = threading.Thread(target=_feed, args=(w, buf.getvalue()), daemon=True)
    feeder.start()
    receive(
        workspace, generation, size=archive.size, sha256=archive.sha256, limits=Limits(), fd=r, idle_timeout=5
    )
    feeder.join()
    os.close(r)


def _feed(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.close(fd)


class Pod:
    """`receive_delta` in a thread, with the plugin's stdin and stdout as pipes; bytes counted."""

    def __init__(self, workspace: Path, generation: int, root: Path, limits: Limits | None = None) -> None:
        self.tree = scan(root)
        self.archive = write_archive(self.tree, io.BytesIO())
        self.entries = tree_manifest(self.tree, self.archive)
        encoded = encode(self.entries)
        self.manifest = gzip.compress(encoded, mtime=0)
        self.stdin_r, self.stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        self.out = os.fdopen(out_r, "rb")
        self.sent = 0
        self.result: object = None

        def run() -> None:
            with os.fdopen(out_w, "wb") as out:
                try:
                    self.result = receive_delta(
                        workspace, generation, manifest_size=len(self.manifest),
                        manifest_sha256=digest(encoded), sha256=self.archive.sha256, limits=Limits(),
                        fd=self.stdin_r, out=out, idle_timeout=5,
                    )  # fmt: skip
                except SyncError as e:
                    self.result = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def write(self, data: bytes) -> None:
        self.sent += len(data)
        threading.Thread(target=_write_all, args=(self.stdin_w, data), daemon=True).start()

    def exchange(self, tmp: Path) -> tuple[object, Answer, int]:
        self.write(self.manifest)
        line = self.out.readline()
        answer = parse_answer(line.rstrip(b"\n"), self.entries)
        if answer.base is not None:
            size = write_payload(self.tree, self.entries, answer, tmp / "payload.gz")
            self.write(str(size).zfill(SIZE_DIGITS).encode() + (tmp / "payload.gz").read_bytes())
        self.thread.join(timeout=30)
        with contextlib.suppress(OSError):
            os.close(self.stdin_w)
        return self.result, answer, self.sent + len(line)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    with contextlib.suppress(OSError):
        while view:
            view = view[os.write(fd, view) :]


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    workspace, root, scratch = tmp_path / "ws", tmp_path / "project", tmp_path / "scratch"
    for d in (workspace, scratch):
        d.mkdir()
    project(root)
    yield workspace, root, scratch


def tree_of(path: Path) -> list[ManifestEntry]:
    return list(manifest_of(path, Limits()))


def test_a_one_line_edit_sends_a_few_kilobytes_and_publishes_exactly_the_edited_tree(
    dirs: tuple[Path, Path, Path],
) -> None:
    workspace, root, scratch = dirs
    publish_full(workspace, root, 0)
    with open(root / "train.py", "ab") as f:
        f.write(b"print('one more line')\n")
    marker, answer, sent = Pod(workspace, 1, root).exchange(scratch)
    assert marker == read_marker(workspace, 1) and answer.base == 0
    assert [e for e, _ in answer.want] == [i for i, e in enumerate(tree_of(root)) if e.path == "train.py"]
    assert tree_of(layout.generation_dir(workspace, 1)) == tree_of(root)
    assert sent < 5_000 < (root / "train.py").stat().st_size
    unchanged = layout.generation_dir(workspace, 1) / "pkg" / "m3.py"
    assert unchanged.stat().st_ino == (layout.generation_dir(workspace, 0) / "pkg" / "m3.py").stat().st_ino
    assert read_marker(workspace, 1).sha256 == write_archive(scan(root), io.BytesIO()).sha256  # type: ignore[union-attr]


def test_a_damaged_base_costs_bytes_not_a_wrong_tree(dirs: tuple[Path, Path, Path]) -> None:
    workspace, root, scratch = dirs
    publish_full(workspace, root, 0)
    damaged = layout.generation_dir(workspace, 0) / "pkg" / "m5.py"
    damaged.write_bytes(b"rot" + damaged.read_bytes()[3:])
    (layout.generation_dir(workspace, 0) / "pkg" / "m6.py").unlink()
    marker, answer, _ = Pod(workspace, 1, root).exchange(scratch)
    assert marker == read_marker(workspace, 1)
    wanted = {tree_of(root)[i].path for i, _ in answer.want}
    assert wanted == {"pkg/m5.py", "pkg/m6.py"}
    assert tree_of(layout.generation_dir(workspace, 1)) == tree_of(root)


def test_without_a_published_generation_the_answer_is_no_base_and_nothing_is_written(
    dirs: tuple[Path, Path, Path],
) -> None:
    workspace, root, scratch = dirs
    result, answer, _ = Pod(workspace, 0, root).exchange(scratch)
    assert (result, answer) == (None, Answer(None))
    assert not layout.generations_dir(workspace).exists() or not any(
        layout.generations_dir(workspace).iterdir()
    )


def test_a_failed_delta_records_nothing_so_the_archive_can_follow(dirs: tuple[Path, Path, Path]) -> None:
    workspace, root, _scratch = dirs
    publish_full(workspace, root, 0)
    (root / "train.py").write_bytes(b"changed\n")
    pod = Pod(workspace, 1, root)
    pod.write(pod.manifest)
    pod.out.readline()
    pod.write(b"9".zfill(SIZE_DIGITS) + b"garbage!!")
    pod.thread.join(timeout=30)
    assert isinstance(pod.result, SyncError) and pod.result.reason == "InvalidArchive"
    assert read_failure(workspace, 1) is None and not layout.generation_dir(workspace, 1).exists()
    publish_full(workspace, root, 1)
    assert tree_of(layout.generation_dir(workspace, 1)) == tree_of(root)


def test_a_manifest_that_is_not_the_declared_digest_is_refused(dirs: tuple[Path, Path, Path]) -> None:
    workspace, root, _ = dirs
    publish_full(workspace, root, 0)
    pod = Pod(workspace, 1, root)
    pod.manifest = gzip.compress(encode(pod.entries[:-1]), mtime=0)[: len(pod.manifest)].ljust(
        len(pod.manifest), b"\0"
    )
    pod.write(pod.manifest)
    pod.thread.join(timeout=30)
    assert isinstance(pod.result, SyncError) and pod.result.reason in ("ChecksumMismatch", "InvalidArchive")
    assert read_failure(workspace, 1) is None


def test_the_digest_is_the_same_on_both_sides(dirs: tuple[Path, Path, Path]) -> None:
    workspace, root, _ = dirs
    publish_full(workspace, root, 0)
    tree = scan(root)
    sent = encode(tree_manifest(tree, write_archive(tree, io.BytesIO())))
    assert digest(sent) == digest(encode(manifest_of(layout.generation_dir(workspace, 0), Limits())))
    assert hashlib.sha256(sent).hexdigest() == digest(sent)
