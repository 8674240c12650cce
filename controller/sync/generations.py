"""Publishing a generation: filled aside, renamed into place, then marked, then made CURRENT.

`publish` guarantees, whatever `fill` does:
- generation G appears as `generations/<G>/` in one rename of a fully filled temp dir; its marker
  `.sync_success` is written (temp file + rename) only after that, and `CURRENT` (same way) last,
  and only when G is newer than what CURRENT names; so a reader that finds a marker has a complete
  tree, and CURRENT never names an incomplete or older generation;
- a fill that raises `SyncError` (or fails on the volume: `WorkspaceError`) leaves no `<G>/` and no
  temp dir, and records `generations/<G>.failed` with the reason and message (unless asked not
  to: a delta that fails leaves the generation to the full archive);
- an existing generation (published or failed) is never overwritten: `WorkspaceError`, nothing
  recorded, nothing touched. This is checked before filling and again just before the rename, so
  a `fetch` that gave up (`UploadTimeout` recorded) while an upload was still arriving wins (a
  window of one check-then-rename remains);
- a generation whose marker cannot be written is renamed aside, removed and recorded as failed.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from controller.sync import layout
from controller.sync.atomic import write_atomic
from controller.sync.errors import INVALID_ARCHIVE, WORKSPACE_ERROR, SyncError
from controller.sync.limits import Stats
from controller.sync.remove import remove_tree

Fill = Callable[[Path], Stats]


@dataclass(frozen=True)
class Marker:
    """The content of `generations/<G>/.sync_success`."""

    generation: int
    sha256: str | None
    files: int
    bytes: int
    source: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Marker:
        """Parse a marker; ValueError when it is not one."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("marker is not a JSON object")
        return cls(
            generation=_int(data, "generation"),
            sha256=data.get("sha256") if isinstance(data.get("sha256"), str) else None,
            files=_int(data, "files"),
            bytes=_int(data, "bytes"),
            source=str(data.get("source", "")),
        )


def _int(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"marker field {key!r} is not an integer")
    return value


def publish(
    workspace: Path,
    generation: int,
    fill: Fill,
    *,
    source: str,
    sha256: str | None = None,
    records_failure: bool = True,
) -> Marker:
    """Fill generation `generation` with `fill(tmpdir)` and publish it; see the module docstring.
    With `records_failure=False` a fill that fails records nothing, so the generation stays free
    for another try (a delta's fallback to the full archive)."""
    _refuse_existing(workspace, generation)
    tmp = _make_tmp(workspace, generation)
    stats = _fill_or_record(workspace, generation, fill, tmp, records_failure)
    _move_into_place(workspace, generation, tmp)
    marker = Marker(generation, sha256 or stats.sha256, stats.files, stats.bytes, source)
    try:
        write_atomic(layout.marker_path(workspace, generation), marker.to_json().encode() + b"\n")
    except OSError as e:
        error = SyncError(WORKSPACE_ERROR, f"cannot mark generation {generation}: {e}")
        _withdraw(workspace, generation, error)
        raise error from e
    try:
        _advance_current(workspace, generation)
    except OSError as e:
        raise SyncError(WORKSPACE_ERROR, f"cannot update {layout.CURRENT}: {e}") from e
    return marker


def _make_tmp(workspace: Path, generation: int) -> Path:
    gens = layout.generations_dir(workspace)
    try:
        gens.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{layout.TMP_PREFIX}{generation}-", dir=gens))
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the tree from workers of another uid
    except OSError as e:
        raise SyncError(WORKSPACE_ERROR, f"cannot create a generation in {gens}: {e}") from e
    return tmp


def _move_into_place(workspace: Path, generation: int, tmp: Path) -> None:
    """Rename the filled temp dir to `<G>/`, unless `<G>` appeared or failed meanwhile."""
    try:
        # `fetch` may have given up meanwhile (UploadTimeout recorded): never publish over that
        _refuse_existing(workspace, generation)
        os.rename(tmp, layout.generation_dir(workspace, generation))
    except SyncError:
        remove_tree(tmp)
        raise
    except OSError as e:
        remove_tree(tmp)
        raise SyncError(WORKSPACE_ERROR, f"cannot publish generation {generation}: {e}") from e


def _withdraw(workspace: Path, generation: int, error: SyncError) -> None:
    """Take back an unmarked generation (renamed aside first: never half-deleted under its name)."""
    final = layout.generation_dir(workspace, generation)
    aside = final.with_name(f"{layout.TMP_PREFIX}{generation}-withdrawn")
    try:
        os.rename(final, aside)
    except OSError:
        return  # it stays unmarked, which every reader already ignores
    remove_tree(aside)
    record_failure(workspace, generation, error)


def _refuse_existing(workspace: Path, generation: int) -> None:
    if generation < 0:
        raise SyncError(WORKSPACE_ERROR, f"generation {generation} is negative")
    if layout.generation_dir(workspace, generation).exists():
        raise SyncError(WORKSPACE_ERROR, f"generation {generation} already exists")
    if layout.failed_path(workspace, generation).exists():
        raise SyncError(WORKSPACE_ERROR, f"generation {generation} already failed")


def _fill_or_record(workspace: Path, generation: int, fill: Fill, tmp: Path, records: bool) -> Stats:
    """Run `fill`; on failure remove `tmp`, record `<G>.failed` (if `records`) and raise the
    SyncError."""
    try:
        return fill(tmp)
    except SyncError as e:
        error = e
    except OSError as e:
        error = volume_error(e)
    except BaseException:
        remove_tree(tmp)
        raise
    remove_tree(tmp)
    if records:
        record_failure(workspace, generation, error)
    raise error


def volume_error(e: OSError) -> SyncError:
    """An OSError while writing a tree: the entry's fault (a name the volume refuses) or the volume's."""
    if e.errno in (errno.ENAMETOOLONG, errno.EILSEQ, errno.EINVAL):
        return SyncError(INVALID_ARCHIVE, f"entry cannot be written: {e.strerror}: {e.filename}")
    return SyncError(WORKSPACE_ERROR, f"{e.strerror or e}: {e.filename or ''}".rstrip(": "))


def record_failure(workspace: Path, generation: int, error: SyncError) -> None:
    """Write `generations/<G>.failed`; best effort (a full volume may refuse even this)."""
    body = json.dumps({"reason": error.reason, "message": error.message}, sort_keys=True)
    try:
        layout.generations_dir(workspace).mkdir(parents=True, exist_ok=True)
        write_atomic(layout.failed_path(workspace, generation), body.encode() + b"\n")
    except OSError:
        pass


def _advance_current(workspace: Path, generation: int) -> None:
    """Point CURRENT at `generation` unless it names a newer one; two sync pods publishing at once
    (a quick second hot reload) take turns on a lock file, so CURRENT never goes back."""
    lock = os.open(
        layout.generations_dir(workspace) / layout.CURRENT_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644
    )
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = layout.read_current(workspace)
        if current is None or generation > current:
            write_atomic(layout.current_path(workspace), f"{generation}\n".encode())
    finally:
        os.close(lock)  # releases the lock


def read_marker(workspace: Path, generation: int) -> Marker | None:
    """The marker of a published generation, or None (not published, or unreadable)."""
    try:
        return Marker.from_json(layout.marker_path(workspace, generation).read_text())
    except (OSError, ValueError):
        return None


def read_failure(workspace: Path, generation: int) -> SyncError | None:
    """The recorded failure of a generation, or None; a garbled record reads as WorkspaceError."""
    try:
        text = layout.failed_path(workspace, generation).read_text()
    except OSError:
        return None
    try:
        data = json.loads(text)
        return SyncError(str(data["reason"]), str(data["message"]))
    except (ValueError, KeyError, TypeError):
        return SyncError(WORKSPACE_ERROR, f"generation {generation} failed (unreadable record)")
