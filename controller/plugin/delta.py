"""A hot reload's upload as a delta: send the tree's manifest, then only what the workspace lacks.

One exec session runs the sync program's `delta` in the generation's sync pod (docs/workspace.md
has the exchange): the plugin sends the manifest (`controller.sync.manifest`: path, kind, mode,
size and SHA-256 of every entry, gzip-compressed), the pod answers which files it does not hold
(by content, against the newest published generation) with the old file's chunk ids where the
same path held other content, and the plugin sends just those files, each as the ops that rebuild
it (`controller.sync.chunks`). The pod assembles, verifies every file and the tree digest, and
publishes with the archive's SHA-256 as `receive` would.

The pod's answer is trusted no further than the files it names: it must be one bounded JSON line
naming files of this manifest, each once and in order, with well-formed chunk ids, else the delta
is abandoned; the plugin only ever reads files it scanned. `send_delta` never raises for the
delta itself: it answers why not (`Fallback`), and the caller sends the whole archive with
`receive` — the same generation, since a failed delta records nothing.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websocket import WebSocketException

from controller.plugin.archive import Archive
from controller.plugin.errors import PluginError
from controller.plugin.kube import Kube
from controller.plugin.pack import Tree
from controller.plugin.upload import ExecSession, Traffic, failure_line, finish_sending
from controller.sync import chunks, protocol
from controller.sync.delta import SIZE_DIGITS
from controller.sync.manifest import (
    DIR,
    DIR_MODE,
    FILE,
    SYMLINK,
    SYMLINK_MODE,
    ManifestEntry,
    digest,
    encode,
    file_mode,
)

ANSWER_TIMEOUT = 300.0  # the pod hashes the base generation before it answers
MAX_ANSWER = 64 * 1024 * 1024
MAX_IDS = chunks.CHUNKED_MAX // chunks.MIN_CHUNK + 1  # every chunk but the last has MIN_CHUNK bytes
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Sent:
    """A published delta: the marker, the base generation and how many files went."""

    marker: dict[str, Any]
    base: int
    files: int


@dataclass(frozen=True)
class Fallback:
    """Why the delta did not publish (the whole archive goes instead)."""

    reason: str


@dataclass(frozen=True)
class Answer:
    """The pod's checked answer: the base generation (None: none) and the files wanted, each with
    the old file's chunk ids or None."""

    base: int | None
    want: tuple[tuple[int, tuple[str, ...] | None], ...] = ()


def tree_manifest(tree: Tree, archive: Archive) -> tuple[ManifestEntry, ...]:
    """The manifest of what `archive` holds (each file's SHA-256 from the archive's own read)."""
    out: list[ManifestEntry] = []
    for e in tree.entries:
        if e.kind == "dir":
            out.append(ManifestEntry(e.path, DIR, DIR_MODE))
        elif e.kind == "symlink":
            out.append(ManifestEntry(e.path, SYMLINK, SYMLINK_MODE, link=e.link))
        else:
            out.append(ManifestEntry(e.path, FILE, file_mode(e.mode), e.size, archive.file_sha256[e.path]))
    return tuple(out)


def parse_answer(line: bytes, entries: Sequence[ManifestEntry]) -> Answer:
    """The pod's answer, checked against the manifest; `ValueError` saying what is wrong."""
    body = json.loads(line)
    if not isinstance(body, dict) or "base" not in body:
        raise ValueError("not an answer")
    base = body["base"]
    if base is None:
        return Answer(None)
    if not _count(base) or not isinstance(body.get("want"), list):
        raise ValueError("no base generation or no list of files")
    want: list[tuple[int, tuple[str, ...] | None]] = []
    previous = -1
    for item in body["want"]:
        if not (isinstance(item, list) and len(item) == 2):
            raise ValueError(f"{str(item)[:40]} is not [index, ids]")
        index, ids = item
        if not _count(index) or not previous < index < len(entries):
            raise ValueError(f"file index {str(index)[:20]} is out of order or range")
        if entries[index].kind != FILE:
            raise ValueError(f"entry {index} is not a file")
        previous = index
        want.append((index, None if ids is None else _ids(ids)))
    return Answer(base, tuple(want))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _ids(ids: Any) -> tuple[str, ...]:
    if not isinstance(ids, list) or len(ids) > MAX_IDS:
        raise ValueError("chunk ids are not a list of a bounded length")
    for cid in ids:
        if not (isinstance(cid, str) and len(cid) == chunks.ID_LENGTH and _HEX.issuperset(cid)):
            raise ValueError(f"{str(cid)[:20]!r} is not a chunk id")
    return tuple(ids)


def write_payload(tree: Tree, entries: Sequence[ManifestEntry], answer: Answer, path: Path) -> int:
    """Write the ops of every wanted file, gzip-compressed, to `path`; its size."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        for index, ids in answer.want:
            entry = entries[index]
            with open(tree.root / entry.path, "rb") as f:
                if ids is not None and entry.size <= chunks.CHUNKED_MAX:
                    ops = chunks.delta_ops(f.read(chunks.CHUNKED_MAX + 1), ids)
                    for op in ops:
                        gz.write(op)
                else:
                    for op in chunks.whole_file_ops(f):
                        gz.write(op)
    return path.stat().st_size


def send_delta(
    kube: Kube,
    pod: str,
    generation: int,
    tree: Tree,
    archive: Archive,
    workdir: Path,
    traffic: Traffic,
    progress: Callable[[int], None],
) -> Sent | Fallback:
    """Run `delta` in `pod` (see the module docstring)."""
    entries = tree_manifest(tree, archive)
    encoded = encode(entries)
    manifest = gzip.compress(encoded, compresslevel=9, mtime=0)
    command = protocol.delta_argv(
        generation, manifest_size=len(manifest), manifest_sha256=digest(encoded), sha256=archive.sha256
    )
    try:
        session = ExecSession(kube, pod, command, traffic=traffic)
    except PluginError as e:
        return Fallback(e.message)
    try:
        return _exchange(session, tree, entries, manifest, workdir, progress)
    except (WebSocketException, OSError) as e:
        return Fallback(f"connection lost: {e}")
    finally:
        session.ws.close()


def _exchange(
    session: ExecSession,
    tree: Tree,
    entries: Sequence[ManifestEntry],
    manifest: bytes,
    workdir: Path,
    progress: Callable[[int], None],
) -> Sent | Fallback:
    session.ws.write_stdin(manifest)
    line = _answer_line(session)
    if line is None:
        return Fallback(_why_ended(session))
    try:
        answer = parse_answer(line, entries)
    except ValueError as e:
        return Fallback(f"the sync pod's answer is refused: {e}")
    if answer.base is None:
        return Fallback("no published generation to start from")
    payload = workdir / "delta.gz"
    size = write_payload(tree, entries, answer, payload)
    session.ws.write_stdin(str(size).zfill(SIZE_DIGITS).encode())
    outcome = finish_sending(session, payload, progress)
    if outcome.exit_code is None:
        return Fallback(outcome.status_message or "no exit status")
    if outcome.exit_code != 0:
        return Fallback(failure_line(outcome))
    try:
        marker: dict[str, Any] = json.loads(outcome.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Fallback("the sync pod printed no marker")
    return Sent(marker=marker, base=answer.base, files=len(answer.want))


def _answer_line(session: ExecSession) -> bytes | None:
    """The first stdout line, once complete (None: the command ended, went silent or said too
    much first)."""
    deadline = time.monotonic() + ANSWER_TIMEOUT
    pending = b""
    while time.monotonic() < deadline and session.ws.is_open() and len(pending) <= MAX_ANSWER:
        session.poll(timeout=1.0)
        pending += session.read_stdout()
        end = pending.find(b"\n")
        if end >= 0:
            return pending[:end]
    return None


def _why_ended(session: ExecSession) -> str:
    outcome = session.outcome()
    if outcome.exit_code is None:
        return "the sync pod did not answer"
    return failure_line(outcome)
