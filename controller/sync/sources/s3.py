"""The `s3` source: one archive object, or every object under a prefix, as a generation.

Why boto3: it is the maintained S3 client (request signing, retries, every S3-compatible store
through an endpoint URL); it is the `sync` extra, which the controller image installs, and is
imported only when an `s3` source runs, with a clear error when it is missing.

What this module guarantees:
- Credentials and region come from the standard `AWS_*` environment variables (the source's
  Secret, as `envFrom`); `AWS_ENDPOINT_URL` is also passed explicitly (older boto3 ignore the
  variable) and turns on path-style addressing, which S3-compatible stores expect.
- `s3://bucket/key.tar.gz` (`.tgz`, `.tar`): the object is streamed through the archive checker,
  the same one an upload meets, so it is never held whole in memory or on disk; the marker's
  `sha256` is the object's.
- `s3://bucket/prefix/`: every object under the prefix becomes a file at its key relative to the
  prefix (mode 0644; a key ending in `/` is a directory). A key that is absolute, climbs out
  (`..`), names the reserved marker, or is both a file and a directory is `InvalidArchive`; the
  file count and declared sizes are charged to the limits before anything is downloaded, and no
  object may bring more bytes than it declared.
- Every failure of the store (no such bucket or key, access denied, bad credentials, an
  unreachable endpoint, a broken download) is `S3FetchFailed` with one line naming the URI.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from controller.sync import names
from controller.sync.archive import extract_archive
from controller.sync.errors import INVALID_ARCHIVE, S3_FETCH_FAILED, SyncError
from controller.sync.generations import Marker, publish
from controller.sync.limits import Limits, Stats, Tally
from controller.sync.request import FetchRequest

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    key: str

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def is_prefix(self) -> bool:
        return self.key == "" or self.key.endswith("/")

    @property
    def is_archive(self) -> bool:
        return self.key.endswith(ARCHIVE_SUFFIXES)

    @property
    def gzipped(self) -> bool:
        return not self.key.endswith(".tar")


def parse_uri(uri: str) -> S3Uri:
    """`s3://bucket/key` → S3Uri; `S3FetchFailed` unless it names an archive or a prefix."""
    parts = urlsplit(uri)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise SyncError(S3_FETCH_FAILED, f"not an s3://bucket/key URI: {uri!r}")
    parsed = S3Uri(parts.netloc, parts.path.removeprefix("/"))
    if not (parsed.is_prefix or parsed.is_archive):
        raise SyncError(
            S3_FETCH_FAILED,
            f"{parsed}: name an archive ({', '.join(ARCHIVE_SUFFIXES)}) or a prefix ending in '/'",
        )
    return parsed


def fetch(request: FetchRequest) -> Marker:
    """Publish `request.uri` as generation `request.generation`."""
    if not request.uri:
        raise SyncError(S3_FETCH_FAILED, "the s3 source needs --uri")
    uri = parse_uri(request.uri)

    def fill(tmp: Path) -> Stats:
        fetched = download(tmp, uri, request.limits, request.env)
        # a streamed object's digest is known only now: the marker takes it from the stats
        return dataclasses.replace(fetched.stats, sha256=fetched.sha256)

    marker = publish(request.workspace, request.generation, fill, source="s3")
    if marker.sha256:
        print(f"Fetched {uri}: sha256 of the object {marker.sha256}", flush=True)
    return marker


@dataclass(frozen=True)
class Fetched:
    stats: Stats
    sha256: str | None  # the archive object's; None for a prefix


def download(dest: Path, uri: S3Uri, limits: Limits, env: Mapping[str, str]) -> Fetched:
    """Fill the empty directory `dest` from `uri` (see the module docstring)."""
    client = make_client(env)
    with store_errors(uri, env):
        if uri.is_prefix:
            return Fetched(_Prefix(client, uri, dest, limits).fetch(), None)
        body = client.get_object(Bucket=uri.bucket, Key=uri.key)["Body"]
        stream = _HashingStream(body, uri)
        try:
            stats = extract_archive(stream, dest, limits, compression="gz" if uri.gzipped else "none")
        except SyncError as e:
            if e.reason == S3_FETCH_FAILED:
                raise
            raise SyncError(e.reason, f"{uri}: {e.message}") from None
        finally:
            body.close()
        return Fetched(stats, stream.hexdigest())


def make_client(env: Mapping[str, str]) -> Any:
    """A boto3 S3 client configured from `env`."""
    try:
        # the sync extra, needed by this source only; boto3 ships no type information
        import boto3  # type: ignore[import-untyped]  # noqa: PLC0415
        from botocore.config import Config  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        raise SyncError(
            S3_FETCH_FAILED, "the s3 source needs boto3: install torchrun-controller[sync]"
        ) from None
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
    config = Config(
        s3={"addressing_style": "path" if endpoint else "auto"},
        retries={"mode": "standard", "max_attempts": 3},
        connect_timeout=10,
        read_timeout=60,
    )
    session = boto3.session.Session(
        # from `env` (the pod's, as the CLI read it); unset ones leave boto3 its own chain
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
        aws_session_token=env.get("AWS_SESSION_TOKEN") or None,
        region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
    )
    return session.client("s3", endpoint_url=endpoint, config=config)


@contextmanager
def store_errors(uri: S3Uri, env: Mapping[str, str]) -> Iterator[None]:
    """Turns boto3's exceptions into one-line `S3FetchFailed` errors that name the URI; the
    volume's (OSError) and ours (SyncError) pass through."""
    try:
        yield
    except SyncError:
        raise
    except Exception as e:
        message = describe(e, uri, env)
        if message is None:
            raise
        raise SyncError(S3_FETCH_FAILED, message) from e


def describe(error: Exception, uri: S3Uri, env: Mapping[str, str]) -> str | None:
    """A one-line account of a boto3/botocore failure, or None when `error` is not one."""
    from botocore.exceptions import (  # type: ignore[import-untyped]  # noqa: PLC0415
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
    )

    if isinstance(error, ClientError):
        info = error.response.get("Error", {})
        code = str(info.get("Code", ""))
        text = str(info.get("Message", "")) or str(error)
        if code in ("NoSuchBucket",):
            return f"{uri}: no such bucket {uri.bucket!r}"
        if code in ("NoSuchKey", "404", "NotFound"):
            return f"{uri}: no such key"
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken"):
            return f"{uri}: access denied ({code}: {text})"
        return f"{uri}: {code}: {text}"
    if isinstance(error, NoCredentialsError):
        return f"{uri}: no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    if isinstance(error, EndpointConnectionError):
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "the S3 endpoint"
        return f"{uri}: cannot reach {endpoint}: {error}"
    if isinstance(error, BotoCoreError):
        return f"{uri}: {error}"
    return None


class _HashingStream:
    """A readable stream over an S3 body that hashes what passes and reports store failures
    mid-download as `S3FetchFailed` (the archive checker sees only bytes or a SyncError)."""

    def __init__(self, body: Any, uri: S3Uri) -> None:
        self._body, self._uri = body, uri
        self._hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        try:
            data: bytes = self._body.read(size if size >= 0 else None)
        except Exception as e:
            raise SyncError(S3_FETCH_FAILED, f"{self._uri}: download failed: {e}") from e
        self._hash.update(data)
        return data

    def readable(self) -> bool:
        return True

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class _Prefix:
    """Every object under a prefix, written as files under `dest`."""

    def __init__(self, client: Any, uri: S3Uri, dest: Path, limits: Limits) -> None:
        self._client, self._uri, self._dest = client, uri, dest
        self._tally = Tally(limits)
        self._dirs: set[tuple[str, ...]] = {()}
        self._files: set[tuple[str, ...]] = set()

    def fetch(self) -> Stats:
        found = False
        for key, size in self._objects():
            found = True
            rel = key[len(self._uri.key) :]
            if rel:
                self._one(key, rel, size)
        if not found:
            raise SyncError(S3_FETCH_FAILED, f"{self._uri}: no objects under this prefix")
        return self._tally.stats()

    def _objects(self) -> Iterator[tuple[str, int]]:
        pages = self._client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self._uri.bucket, Prefix=self._uri.key):
            for obj in page.get("Contents", []):
                yield str(obj["Key"]), int(obj["Size"])

    def _one(self, key: str, rel: str, size: int) -> None:
        try:
            parts = names.normalize(rel)
            names.check_reserved(parts, rel)
        except SyncError as e:
            raise SyncError(e.reason, f"s3://{self._uri.bucket}/{key}: {e.message}") from None
        if not parts:
            raise SyncError(INVALID_ARCHIVE, f"s3://{self._uri.bucket}/{key}: not a path under the prefix")
        if rel.endswith("/"):
            self._mkdirs(parts, key)
            return
        self._mkdirs(parts[:-1], key)
        if parts in self._dirs or parts in self._files:
            raise SyncError(INVALID_ARCHIVE, f"s3://{self._uri.bucket}/{key}: duplicate entry {rel!r}")
        self._files.add(parts)
        self._tally.add(size)
        self._download(key, self._dest.joinpath(*parts), size)

    def _mkdirs(self, parts: tuple[str, ...], key: str) -> None:
        for depth in range(1, len(parts) + 1):
            sub = parts[:depth]
            if sub in self._dirs:
                continue
            if sub in self._files:
                raise SyncError(
                    INVALID_ARCHIVE,
                    f"s3://{self._uri.bucket}/{key}: {'/'.join(sub)!r} is both a file and a directory",
                )
            self._tally.add()
            self._dest.joinpath(*sub).mkdir(0o755)
            self._dirs.add(sub)

    def _download(self, key: str, path: Path, size: int) -> None:
        body = self._client.get_object(Bucket=self._uri.bucket, Key=key)["Body"]
        written = 0
        try:
            with open(path, "xb") as out:
                while chunk := body.read(_CHUNK):
                    written += len(chunk)
                    if written > size:  # replaced since it was listed: the limits were charged for `size`
                        raise SyncError(S3_FETCH_FAILED, f"s3://{self._uri.bucket}/{key}: changed while read")
                    out.write(chunk)
        finally:
            body.close()
        os.chmod(path, 0o644)
