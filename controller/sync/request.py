"""What `fetch` hands a source module, and what the module must do with it.

A source is a module `controller.sync.sources.<name>` (git, s3, pvc) with one function:

    def fetch(request: FetchRequest) -> Marker

It fetches `request`'s source into generation `request.generation` of `request.workspace` through
`controller.sync.generations.publish` (so the tree lands atomically, with its marker, or not at
all), checks what it wrote with `controller.sync.tree.check_tree(tmpdir, request.limits)` (or
extracts an archive with `controller.sync.archive.extract_archive`, which checks as it goes), and
raises `SyncError` with its reason (`GitFetchFailed`, `S3FetchFailed`, `SourceNotFound`, ...) on
failure. The command line turns the Marker or the error into the termination message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from controller.sync.limits import Limits


@dataclass(frozen=True)
class FetchRequest:
    """One `fetch` invocation: where to publish, what to fetch, and the pod's environment."""

    workspace: Path
    generation: int
    limits: Limits
    source_dir: Path  # $TORCHRUN_SOURCE_DIR: the pvc source's claim (read-only)
    secret_dir: Path  # $TORCHRUN_SOURCE_SECRET_DIR: the git source's Secret as files
    url: str | None = None  # git
    ref: str | None = None  # git; None: the default branch
    uri: str | None = None  # s3://bucket/key or s3://bucket/prefix/
    sub_path: str | None = None  # pvc
    env: Mapping[str, str] = field(default_factory=dict)  # AWS_* for s3
