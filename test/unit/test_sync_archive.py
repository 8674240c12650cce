"""The archive checker/extractor: every refusal with its reason, and what a good archive becomes."""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
from pathlib import Path

import pytest
from sync_archives import (
    GOOD_ENTRIES,
    HOSTILE,
    SMALL_MAX_BYTES,
    SMALL_MAX_FILES,
    directory,
    file,
    good_archive,
    symlink,
    tar,
    tar_gz,
)

from controller.sync.archive import extract_archive
from controller.sync.copy import copy_tree
from controller.sync.errors import INVALID_ARCHIVE, SyncError
from controller.sync.generations import publish, volume_error
from controller.sync.limits import Limits, Stats
from controller.sync.remove import remove_tree
from controller.sync.tree import check_tree

SMALL = Limits(max_bytes=SMALL_MAX_BYTES, max_files=SMALL_MAX_FILES)


def extract(data: bytes, dest: Path, limits: Limits | None = None, compression: str = "gz") -> Stats:
    dest.mkdir(exist_ok=True)
    return extract_archive(io.BytesIO(data), dest, limits or Limits(), compression=compression)


def test_good_archive_extracts_with_safe_modes(tmp_path: Path) -> None:
    dest = tmp_path / "g"
    stats = extract(good_archive(), dest)

    assert stats == Stats(files=len(GOOD_ENTRIES), bytes=len(b"print('train')\n" * 100) + 19)
    assert (dest / "pkg" / "train.py").read_bytes() == b"print('train')\n" * 100
    assert (dest / "pkg" / "__init__.py").read_bytes() == b""
    run_mode = stat.S_IMODE((dest / "run.sh").stat().st_mode)
    assert run_mode == 0o755  # setuid dropped, execute bits kept
    assert stat.S_IMODE((dest / "pkg" / "train.py").stat().st_mode) == 0o644
    assert os.readlink(dest / "latest.py") == "pkg/train.py"
    assert (dest / "pkg" / "copy.py").stat().st_ino == (dest / "pkg" / "train.py").stat().st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archive_is_refused_with_its_reason(tmp_path: Path, case: str) -> None:
    data, reason, fragment = HOSTILE[case]
    outside = tmp_path / "outside"
    outside.mkdir()

    with pytest.raises(SyncError) as refused:
        extract(data, tmp_path / "dest", SMALL)

    assert (refused.value.reason, fragment in refused.value.message) == (reason, True), refused.value
    assert "\n" not in refused.value.message
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest", "outside"]


def test_root_entry_and_explicit_dir_after_its_files_are_accepted(tmp_path: Path) -> None:
    data = tar_gz([directory("."), file("d/x", b"1"), directory("d"), file("./d//y", b"2")])
    stats = extract(data, tmp_path / "g")
    assert stats == Stats(files=3, bytes=2)  # d, d/x, d/y; "." is the root itself
    assert sorted(os.listdir(tmp_path / "g" / "d")) == ["x", "y"]


def test_symlink_inside_the_tree_to_a_directory_is_kept(tmp_path: Path) -> None:
    data = tar_gz([file("a/b/c.py"), symlink("a/up", "../a/b"), symlink("top", ".")])
    extract(data, tmp_path / "g")
    assert (tmp_path / "g" / "a" / "up" / "c.py").read_bytes() == b"x"


def test_long_names_through_pax_and_gnu_headers(tmp_path: Path) -> None:
    name = "/".join(["d" * 90] * 3) + "/file.py"
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        dest = tmp_path / str(fmt)
        extract(gzip.compress(tar([file(name, b"long")], fmt)), dest)
        assert (dest / name).read_bytes() == b"long"


def test_oversized_extended_header_is_refused_before_it_is_read(tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("a")
        info.pax_headers = {"comment": "x" * (2 * 1024 * 1024)}
        archive.addfile(info, io.BytesIO(b""))
    with pytest.raises(SyncError, match="extended header of"):
        extract(gzip.compress(out.getvalue()), tmp_path / "g")


def pax_chain(chain: int) -> bytes:
    """A tar whose one member `a.py` follows `chain` pax headers in a row."""
    record = b"17 comment=hello\n"
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, len(record)
    block = header.tobuf(tarfile.USTAR_FORMAT) + record.ljust(tarfile.BLOCKSIZE, b"\0")
    member = tarfile.TarInfo("a.py")
    member.size = 2
    body = member.tobuf(tarfile.USTAR_FORMAT) + b"ok".ljust(tarfile.BLOCKSIZE, b"\0")
    return block * chain + body + b"\0" * tarfile.RECORDSIZE


@pytest.mark.parametrize("chain", [17, 5000])  # 5000: tarfile's own recursion would end in RecursionError
def test_a_chain_of_extended_headers_is_an_invalid_archive(tmp_path: Path, chain: int) -> None:
    with pytest.raises(SyncError, match="extended headers before one member") as e:
        extract(gzip.compress(pax_chain(chain)), tmp_path / "g")
    assert e.value.reason == INVALID_ARCHIVE
    extract(gzip.compress(pax_chain(3)), tmp_path / "ok")  # a short chain is fine
    assert (tmp_path / "ok" / "a.py").read_bytes() == b"ok"


def test_negative_size_is_refused(tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("a")
        info.pax_headers = {"size": "-5"}  # would lower the byte tally
        archive.addfile(info, io.BytesIO(b""))
    with pytest.raises(SyncError, match="negative size"):
        extract(gzip.compress(out.getvalue()), tmp_path / "g")


def test_deep_tree_extracts_checks_and_copies(tmp_path: Path) -> None:
    name = "/".join(["d"] * 1500) + "/leaf"  # deeper than Python's recursion limit
    extract(tar_gz([file(name, b"deep")]), tmp_path / "g")
    assert check_tree(tmp_path / "g") == Stats(files=1501, bytes=4)
    copy_tree(tmp_path / "g", tmp_path / "copy")
    assert (tmp_path / "copy" / name).read_bytes() == b"deep"
    for tree in ("g", "copy"):
        remove_tree(tmp_path / tree)
    assert list(tmp_path.iterdir()) == []


def test_deep_tree_refused_at_its_end_is_cleaned_up(tmp_path: Path) -> None:
    deep = "/".join(["d"] * 1500)
    data = tar_gz([file(deep + "/leaf"), file(deep + "/../../x")])

    with pytest.raises(SyncError, match="path traversal"):
        publish(tmp_path, 0, lambda dest: extract_archive(io.BytesIO(data), dest, Limits()), source="upload")
    assert sorted(os.listdir(tmp_path / "generations")) == ["0.failed"]


def test_plain_tar_without_compression(tmp_path: Path) -> None:
    stats = extract(tar([file("a", b"abc")]), tmp_path / "g", compression="none")
    assert stats == Stats(files=1, bytes=3)


def test_gzip_data_given_as_plain_tar_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SyncError) as refused:
        extract(good_archive(), tmp_path / "g", compression="none")
    assert refused.value.reason == INVALID_ARCHIVE


def test_padding_after_the_end_is_accepted_but_not_a_megabyte_of_it(tmp_path: Path) -> None:
    body = tar([file("a")])
    extract(gzip.compress(body + bytes(10240)), tmp_path / "ok")
    with pytest.raises(SyncError, match="after the end of the archive"):
        extract(gzip.compress(body + bytes(2 * 1024 * 1024)), tmp_path / "bomb")


def test_concatenated_gzip_members_are_one_stream(tmp_path: Path) -> None:
    body = tar([file("a", b"1"), file("b", b"2")])
    stats = extract(gzip.compress(body[:700]) + gzip.compress(body[700:]), tmp_path / "g")
    assert stats == Stats(files=2, bytes=2)


def test_byte_limit_counts_declared_sizes_before_writing(tmp_path: Path) -> None:
    data = tar_gz([file("a", b"x" * 600), file("b", b"x" * 600)])
    with pytest.raises(SyncError, match="more than 1000 bytes"):
        extract(data, tmp_path / "g", Limits(max_bytes=1000))
    assert not (tmp_path / "g" / "b").exists()


def test_entry_limit_counts_implicit_directories(tmp_path: Path) -> None:
    with pytest.raises(SyncError, match="more than 2 entries"):
        extract(tar_gz([file("a/b/c")]), tmp_path / "g", Limits(max_files=2))


def test_name_the_volume_refuses_is_the_archives_fault(tmp_path: Path) -> None:
    with pytest.raises(OSError) as refused:
        extract(tar_gz([file("n" * 300)]), tmp_path / "g")
    assert volume_error(refused.value).reason == INVALID_ARCHIVE
