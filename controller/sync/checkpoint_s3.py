"""The S3 mirror of a job's checkpoints (`storage.checkpoints.s3`, docs/checkpoints.md), run by
`prepare` with the s3 source's client (`sources/s3.make_client`: the `AWS_*` variables of the
mirror's Secret).

A checkpoint directory `<name>` of the volume is mirrored as the objects
`<prefix><name>/<relative path>` of its regular files (links and special files are skipped), then
`<prefix><name>/.torchrun-mirrored` (empty), written last: only a copy with that object counts. A
checkpoint file `<name>` (Lightning's `epoch=0-step=10.ckpt`, a torch.save `ckpt_1000.pt`, a
safetensors file) is mirrored as `<prefix><name>/<name>`, then `.torchrun-mirrored` holding
`{"file": true}`; a link (Lightning's `last.ckpt` with `save_last="link"`) is not, its target is.
Copies are ordered like checkpoints on the volume (`controller.checkpoint.discovery.by_age`: by
the step in the name, a file's without its suffix, else by the time of that object).

- `restore(root, uri, env)` — every rank, when the volume has no complete checkpoint (a new
  cluster, a lost volume): downloads the newest complete copy into `<root>/.tmp-s3-<random>/`,
  writes our marker in it and renames it to `<root>/<name>`; a file copy is downloaded there and
  linked to `<root>/<name>` only when discovery finds it complete (its zip end record, its
  safetensors header), so a damaged copy never becomes the resume point. Ranks may race: the
  first rename (or link) wins, the others discard their download (and still answer that name: it
  was restored at this start). Names and keys from the store are untrusted: a name
  must be a plain entry name (no `/`, not starting with `.`), a key below it a relative path
  without `.`, `..` or empty parts; anything else is skipped, so nothing lands outside the root.
- `mirror(root, uri, env, keep, protected=...)` — rank 0, at every start, after retention: uploads
  each complete checkpoint the prefix lacks, then, with `keep`, deletes what the volume's retention
  rule chooses among the copies (`retention.newest_beyond`: only copies with a step, after the
  `keep` newest, never one a framework's state keeps).
The URI is the job's own sub-prefix (`manifests/checkpoint.mirror_prefix`): what other jobs and
namespaces copied is never listed, restored or deleted here.
Both answer `(what they did, problems)`: a store that fails is a problem line naming the URI,
never a failed start (the volume's checkpoints still resume the job).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from controller.checkpoint.discovery import MARKER, Entry, by_age, entry_at, latest, scan, stem_of, step_of
from controller.checkpoint.retention import newest_beyond
from controller.sync.errors import SyncError
from controller.sync.sources.s3 import S3Uri, make_client, parse_uri, store_errors

MIRRORED = ".torchrun-mirrored"


def _safe_name(name: str) -> bool:
    return bool(name) and "/" not in name and not name.startswith(".") and "\x00" not in name


def _safe_relative(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and all(p not in ("", ".", "..") and "\x00" not in p for p in parts)


FILE_COPY = b'{"file": true}\n'  # the body of a file copy's MIRRORED object
MIRRORED_BODY_LIMIT = 1024  # bytes of a MIRRORED object read: the store is the tenant's, not ours


def _is_file_copy(client: Any, prefix: S3Uri, name: str) -> bool:
    """Whether copy `name` is a file's: its MIRRORED object says so (anything else: a directory)."""
    body = client.get_object(Bucket=prefix.bucket, Key=f"{prefix.key}{name}/{MIRRORED}")["Body"]
    try:
        return bool(body.read(MIRRORED_BODY_LIMIT).strip() == FILE_COPY.strip())
    finally:
        body.close()


def _copies(client: Any, uri: S3Uri) -> dict[str, tuple[float | None, list[str]]]:
    """Every copy under the prefix: name → (time of its MIRRORED object or None, its keys)."""
    out: dict[str, tuple[float | None, list[str]]] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=uri.key):
        for obj in page.get("Contents") or ():
            name, _, rel = obj["Key"][len(uri.key) :].partition("/")
            if not _safe_name(name):
                continue
            when, keys = out.get(name, (None, []))
            keys.append(obj["Key"])
            if rel == MIRRORED:
                when = obj["LastModified"].timestamp()
            out[name] = (when, keys)
    return out


def _complete(copies: dict[str, tuple[float | None, list[str]]]) -> list[Entry]:
    entries = [
        Entry(name, Path(name), True, "s3", step_of(stem_of(name) or name), when)
        for name, (when, _) in copies.items()
        if when is not None
    ]
    return by_age(entries)


def _prefix(uri: str) -> S3Uri:
    parsed = parse_uri(uri)
    if not parsed.is_prefix:
        raise SyncError("S3FetchFailed", f"{uri}: the checkpoint mirror must be a prefix ending in /")
    return parsed


def restore(root: Path, uri: str, env: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """Download the newest complete copy when the volume has no complete checkpoint (module doc)."""
    if latest(scan(root)) is not None:
        return None, []
    try:
        prefix = _prefix(uri)
        client = make_client(env)
        with store_errors(prefix, env):
            copies = _copies(client, prefix)
            newest = next(iter(_complete(copies)), None)
            if newest is None:
                return None, []
            root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-s3-", dir=root))
            try:
                if _is_file_copy(client, prefix, newest.name):
                    return _restore_file(client, prefix, newest.name, root, tmp), []
                for key in copies[newest.name][1]:
                    rel = key[len(prefix.key) + len(newest.name) + 1 :]
                    if rel == MIRRORED or not _safe_relative(rel):
                        continue
                    dest = tmp / PurePosixPath(rel)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    client.download_file(prefix.bucket, key, str(dest))
                (tmp / MARKER).write_text("{}\n")
                try:
                    os.rename(tmp, root / newest.name)
                except OSError:
                    if entry_at(root, newest.name) is None:
                        raise
                    # another rank restored it first: theirs is the same copy, restored at this start
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except SyncError as e:
        return None, [f"restoring from {uri}: {e.message}"]
    except OSError as e:
        return None, [f"restoring from {uri}: {e}"]
    return newest.name, []


def _restore_file(client: Any, prefix: S3Uri, name: str, root: Path, tmp: Path) -> str | None:
    """Download file copy `name` into `tmp` and link it to `root/name` when discovery finds it
    complete there; answers `name` when `root/name` is that checkpoint now, else None."""
    client.download_file(prefix.bucket, f"{prefix.key}{name}/{name}", str(tmp / name))
    got = entry_at(tmp, name)
    if got is None or not got.complete or not got.file:
        raise SyncError("S3FetchFailed", f"the copy of {name} is not a complete checkpoint file")
    with contextlib.suppress(FileExistsError):  # another rank restored it first: the same copy
        os.link(tmp / name, root / name)
    again = entry_at(root, name)
    return name if again is not None and again.complete else None


def _upload(client: Any, prefix: S3Uri, entry: Entry) -> None:
    base = f"{prefix.key}{entry.name}/"
    if entry.file:
        client.upload_file(str(entry.path), prefix.bucket, base + entry.name)
        client.put_object(Bucket=prefix.bucket, Key=base + MIRRORED, Body=FILE_COPY)
        return
    for directory, dirs, files in os.walk(entry.path):  # os.walk does not follow links
        dirs.sort()
        for name in sorted(files):
            path = Path(directory, name)
            if path.is_symlink() or not path.is_file():
                continue
            client.upload_file(str(path), prefix.bucket, base + path.relative_to(entry.path).as_posix())
    client.put_object(Bucket=prefix.bucket, Key=base + MIRRORED, Body=b"")


def mirror(
    root: Path, uri: str, env: Mapping[str, str], keep: int | None, *, protected: frozenset[str] = frozenset()
) -> tuple[int, list[str]]:
    """Upload what the prefix lacks, then apply retention to the copies (module doc)."""
    uploaded = 0
    try:
        prefix = _prefix(uri)
        client = make_client(env)
        with store_errors(prefix, env):
            copies = _copies(client, prefix)
            for entry in by_age(scan(root)):
                if entry.file and entry.path.is_symlink():
                    continue  # Lightning's last link: its target is a checkpoint of its own
                if copies.get(entry.name, (None, []))[0] is None:
                    _upload(client, prefix, entry)
                    uploaded += 1
            if keep is not None:
                copies = _copies(client, prefix)
                for old in newest_beyond(_complete(copies), keep, protected):
                    keys = copies[old.name][1]
                    for i in range(0, len(keys), 1000):
                        chunk = [{"Key": k} for k in keys[i : i + 1000]]
                        client.delete_objects(Bucket=prefix.bucket, Delete={"Objects": chunk})
    except SyncError as e:
        return uploaded, [f"mirroring to {uri}: {e.message}"]
    except OSError as e:
        return uploaded, [f"mirroring to {uri}: {e}"]
    return uploaded, []
