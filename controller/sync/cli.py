"""The command line of `python -m controller.sync`: receive, delta, fetch, copy (docs/workspace.md),
prepare (docs/checkpoints.md).

Every command ends in one of two ways: success (exit 0, a line or the marker's JSON on stdout) or
failure (exit 1, one line `Reason: message` on stderr); `delta` prints its answer line first.
`fetch` also writes the termination message, and makes sure a failed generation is recorded as
`generations/<G>.failed`.
Usage errors exit 2 (argparse).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from controller.checkpoint import CheckpointReport, resume
from controller.checkpoint.listing import listing, to_json
from controller.sync import layout
from controller.sync.checkpoint_s3 import mirror, restore
from controller.sync.copy import copy_tree, wait_for_generation
from controller.sync.delta import receive_delta
from controller.sync.errors import (
    GIT_FETCH_FAILED,
    S3_FETCH_FAILED,
    SOURCE_NOT_FOUND,
    UPLOAD_TIMEOUT,
    WORKSPACE_ERROR,
    SyncError,
)
from controller.sync.generations import Marker, read_failure, read_marker, record_failure
from controller.sync.limits import DEFAULT_MAX_FILES, Limits
from controller.sync.pid1 import wait_for_others
from controller.sync.prepare import prepare_tools
from controller.sync.request import FetchRequest
from controller.sync.termination import SyncResult, write_termination_message, write_text_message
from controller.sync.upload import DEFAULT_IDLE_TIMEOUT, receive

SOURCES = ("upload", "git", "s3", "pvc")
ENV_NODE_RANK = "TORCHRUN_NODE_RANK"  # prepare: the pod's node rank (its completion index)
# the reason a source reports when its module is missing from the image
_SOURCE_REASON = {"git": GIT_FETCH_FAILED, "s3": S3_FETCH_FAILED, "pvc": SOURCE_NOT_FOUND}
DEFAULT_FETCH_TIMEOUT = 1800.0
DEFAULT_COPY_TIMEOUT = 600.0
UPLOAD_POLL = 0.2


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run one command; returns the exit code."""
    args = _parser().parse_args(argv)
    env = os.environ if env is None else env
    workspace = layout.workspace_from(env)
    try:
        if args.command == "receive":
            return _receive(args, workspace)
        if args.command == "delta":
            return _delta(args, workspace)
        if args.command == "fetch":
            return _fetch(args, workspace, env)
        if args.command == "prepare":
            return _prepare(args, env)
        if args.command == "checkpoints":
            print(to_json(listing(Path(args.root))))
            return 0
        return _copy(args, workspace)
    except SyncError as e:
        print(f"{e.reason}: {e.message}", file=sys.stderr)
        return 1


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(max_bytes=args.max_bytes, max_files=args.max_files)


def _receive(args: argparse.Namespace, workspace: Path) -> int:
    marker = receive(
        workspace,
        args.generation,
        size=args.size,
        sha256=args.sha256,
        limits=_limits(args),
        fd=sys.stdin.fileno(),
        idle_timeout=args.idle_timeout,
    )
    print(marker.to_json())
    return 0


def _delta(args: argparse.Namespace, workspace: Path) -> int:
    marker = receive_delta(
        workspace,
        args.generation,
        manifest_size=args.manifest_size,
        manifest_sha256=args.manifest_sha256,
        sha256=args.sha256,
        limits=_limits(args),
        fd=sys.stdin.fileno(),
        out=sys.stdout.buffer,
        idle_timeout=args.idle_timeout,
    )
    if marker is not None:
        print(marker.to_json())
    return 0


def _fetch(args: argparse.Namespace, workspace: Path, env: Mapping[str, str]) -> int:
    generation = args.generation
    try:
        marker = (
            _wait_upload(args, workspace) if args.source == "upload" else _fetch_source(args, workspace, env)
        )
    except SyncError as e:
        _record_unless_present(workspace, generation, e)
        write_termination_message(_termination_log(env), SyncResult.failed(generation, e))
        raise
    write_termination_message(_termination_log(env), SyncResult.synced(marker))
    print(
        f"Synced generation {marker.generation} from {marker.source}: {marker.files} entries, "
        f"{marker.bytes} bytes, sha256 {marker.sha256}"
    )
    return 0


def _termination_log(env: Mapping[str, str]) -> Path:
    return layout.env_path(env, layout.ENV_TERMINATION_LOG, layout.DEFAULT_TERMINATION_LOG)


def _record_unless_present(workspace: Path, generation: int, error: SyncError) -> None:
    """Leave `<G>.failed` behind for a failure nothing recorded (and never over a generation)."""
    if not (
        layout.failed_path(workspace, generation).exists()
        or layout.generation_dir(workspace, generation).exists()
    ):
        record_failure(workspace, generation, error)


def _wait_upload(args: argparse.Namespace, workspace: Path) -> Marker:
    """Wait for `receive` to publish or refuse the generation, then for it to exit (`pid1`)."""
    try:
        return _upload_outcome(args, workspace)
    finally:
        wait_for_others()


def _upload_outcome(args: argparse.Namespace, workspace: Path) -> Marker:
    deadline = time.monotonic() + args.timeout
    while True:
        marker = read_marker(workspace, args.generation)
        if marker is not None:
            return marker
        failure = read_failure(workspace, args.generation)
        if failure is not None:
            raise failure
        if time.monotonic() >= deadline:
            raise SyncError(
                UPLOAD_TIMEOUT, f"no upload for generation {args.generation} within {args.timeout:g} s"
            )
        time.sleep(UPLOAD_POLL)


def _fetch_source(args: argparse.Namespace, workspace: Path, env: Mapping[str, str]) -> Marker:
    existing = read_marker(workspace, args.generation)
    if existing is not None:
        return existing  # a re-run of a sync that already succeeded
    failure = read_failure(workspace, args.generation)
    if failure is not None:
        raise failure  # a re-run of one that failed: the same answer (a new generation retries)
    try:  # imported only when asked for, so one source's missing module or library spares the rest
        module = importlib.import_module(f"controller.sync.sources.{args.source}")
    except ImportError as e:
        raise SyncError(_SOURCE_REASON[args.source], f"source {args.source!r} is not available: {e}") from e
    request = FetchRequest(
        workspace=workspace,
        generation=args.generation,
        limits=_limits(args),
        source_dir=layout.env_path(env, layout.ENV_SOURCE_DIR, layout.DEFAULT_SOURCE_DIR),
        secret_dir=layout.env_path(env, layout.ENV_SOURCE_SECRET_DIR, layout.DEFAULT_SOURCE_SECRET_DIR),
        url=args.url,
        ref=args.ref,
        uri=args.uri,
        sub_path=args.sub_path,
        env=dict(env),
    )
    fetch = getattr(module, "fetch", None)
    if not callable(fetch):
        raise SyncError(_SOURCE_REASON[args.source], f"source {args.source!r} has no fetch()")
    marker: Marker = fetch(request)
    return marker


def _copy(args: argparse.Namespace, workspace: Path) -> int:
    marker = wait_for_generation(workspace, args.min_generation, args.timeout)
    try:
        copy_tree(layout.generation_dir(workspace, marker.generation), Path(args.target))
    except OSError as e:
        raise SyncError("WorkspaceError", f"copying generation {marker.generation}: {e}") from e
    print(
        f"Copied generation {marker.generation} ({marker.files} entries, {marker.bytes} bytes, "
        f"sha256 {marker.sha256}) to {args.target}"
    )
    return 0


def _prepare(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Fill the tools directory; with `--checkpoints`, choose what to resume from (rank 0 also
    prunes and reports it as the termination message)."""
    target = Path(args.target)
    variables: dict[str, str] = {}
    rank0 = env.get(ENV_NODE_RANK, "0") == "0"
    if args.checkpoints:
        report = _checkpoints(args, env, rank0, variables)
        if rank0:
            write_text_message(_termination_log(env), report.to_json())
        print(_resume_line(report))
    try:
        prepare_tools(target, variables)
    except OSError as e:
        raise SyncError(WORKSPACE_ERROR, f"preparing {target}: {e}") from e
    print(f"Prepared {target}")
    return 0


def _checkpoints(
    args: argparse.Namespace, env: Mapping[str, str], rank0: bool, variables: dict[str, str]
) -> CheckpointReport:
    """Restore from the S3 mirror when the volume has nothing complete, choose (rank 0 prunes),
    then rank 0 brings the mirror up to date (checkpoint_s3.py)."""
    root = Path(args.checkpoints)
    downloaded, problems = restore(root, args.s3, env) if args.s3 else (None, [])
    chosen = resume(root, attempt=args.attempt, keep=args.keep, prunes=rank0)
    variables.update(chosen.env)
    mirrored = 0
    if args.s3 and rank0:
        mirrored, more = mirror(root, args.s3, env, args.keep, protected=chosen.protected)
        problems += more
    report = chosen.report
    problems = list(report.problems) + problems
    return dataclasses.replace(report, downloaded=downloaded, mirrored=mirrored, problems=tuple(problems))


def _resume_line(report: CheckpointReport) -> str:
    said = [f"resuming from {report.resumed_from}" if report.resumed_from else "no complete checkpoint"]
    said.append(f"{report.count} complete in {report.root}")
    if report.pruned:
        said.append(f"{report.pruned} removed by retention")
    if report.downloaded:
        said.append(f"{report.downloaded} restored from the S3 mirror")
    if report.mirrored:
        said.append(f"{report.mirrored} uploaded to the S3 mirror")
    return "; ".join(said + list(report.problems))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m controller.sync", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("receive", help="read an uploaded archive from stdin into a generation")
    _generation(rec)
    rec.add_argument("--size", type=_non_negative, required=True, help="bytes to read from stdin")
    rec.add_argument("--sha256", type=_sha256, required=True, help="SHA-256 of those bytes (hex)")
    rec.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT, help="seconds")
    _limit_flags(rec)
    delta = commands.add_parser("delta", help="read a manifest, ask for what the workspace lacks, publish")
    _generation(delta)
    delta.add_argument("--manifest-size", type=_non_negative, required=True, help="compressed bytes")
    delta.add_argument("--manifest-sha256", type=_sha256, required=True, help="of the decoded manifest")
    delta.add_argument("--sha256", type=_sha256, required=True, help="the tree's archive SHA-256")
    delta.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT, help="seconds")
    _limit_flags(delta)
    fetch = commands.add_parser("fetch", help="fetch a source into a generation (the sync pod)")
    fetch.add_argument("--source", choices=SOURCES, required=True)
    _generation(fetch)
    fetch.add_argument("--timeout", type=float, default=DEFAULT_FETCH_TIMEOUT, help="upload: seconds")
    fetch.add_argument("--url", help="git: repository URL")
    fetch.add_argument("--ref", help="git: branch, tag or commit")
    fetch.add_argument("--uri", help="s3: s3://bucket/key or s3://bucket/prefix/")
    fetch.add_argument("--sub-path", help="pvc: path inside the source claim")
    _limit_flags(fetch)
    copy = commands.add_parser("copy", help="copy the newest generation out (the workers' init container)")
    copy.add_argument("--min-generation", type=_non_negative, required=True)
    copy.add_argument("--target", required=True, help="directory to copy into")
    copy.add_argument("--timeout", type=float, default=DEFAULT_COPY_TIMEOUT, help="seconds")
    prepare = commands.add_parser("prepare", help="fill /opt/torchrun (every worker's first init container)")
    prepare.add_argument("--target", required=True, help="directory to fill (the torchrun-tools volume)")
    prepare.add_argument("--checkpoints", help="the job's checkpoint root: choose what to resume from")
    prepare.add_argument("--attempt", type=_non_negative, default=0, help="the whole-job restart number")
    prepare.add_argument("--keep", type=_positive, default=None, help="retention: complete checkpoints kept")
    prepare.add_argument("--s3", help="the checkpoints' S3 mirror: s3://bucket/prefix/")
    listed = commands.add_parser("checkpoints", help="every entry of a checkpoint root, as JSON (the plugin)")
    listed.add_argument("--root", required=True, help="the job's checkpoint root")
    return parser


def _generation(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--generation", type=_non_negative, required=True)


def _limit_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-bytes", type=_non_negative, default=None, help="uncompressed bytes")
    parser.add_argument("--max-files", type=_non_negative, default=DEFAULT_MAX_FILES, help="entries")


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


def _sha256(text: str) -> str:
    if len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise argparse.ArgumentTypeError("not a hex SHA-256")
    return text.lower()
