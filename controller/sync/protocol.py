"""The sync program's calling half of its contract: how the controller and the plugin run it.

One home for what three packages used to spell out on their own: the program (`PROGRAM`), the sync
pod's name (`sync_pod_name`) and container name (`CONTAINER`), and the argv of each command —
`receive_argv` and `delta_argv` (the plugin, over pods/exec into the sync pod), `fetch_argv` (the sync pod's
command), `copy_argv` (the workers' init container), `checkpoints_argv` (the plugin's listing pod),
`prepare_argv` (every worker's first init container). Every argv built here is parsed by the sync
program's own parser in a unit test, so the two halves cannot drift. The return half of the contract
(what the program reports back) lives in `termination.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

PROGRAM: tuple[str, ...] = ("python", "-m", "controller.sync")
CONTAINER = "sync"  # the sync pod's one container: the plugin execs `receive` into it


def sync_pod_name(job_name: str, generation: int) -> str:
    """The sync pod of generation `generation` of job `job_name`: `<job>-sync-<G>`."""
    return f"{job_name}-sync-{generation}"


def receive_argv(generation: int, *, size: int, sha256: str) -> list[str]:
    """`receive`: read an archive of `size` bytes with that SHA-256 from stdin into a generation."""
    return [*PROGRAM, "receive", "--generation", str(generation), "--size", str(size), "--sha256", sha256]


def delta_argv(generation: int, *, manifest_size: int, manifest_sha256: str, sha256: str) -> list[str]:
    """`delta`: read a compressed manifest of `manifest_size` bytes (decoded SHA-256
    `manifest_sha256`), answer what is missing, read it and publish the tree whose archive has
    SHA-256 `sha256`."""
    return [
        *PROGRAM,
        "delta",
        "--generation",
        str(generation),
        "--manifest-size",
        str(manifest_size),
        "--manifest-sha256",
        manifest_sha256,
        "--sha256",
        sha256,
    ]


@dataclass(frozen=True)
class FetchSource:
    """Where `fetch` takes generation's code from: the source's name and its own flags (None: unset)."""

    source: str  # upload, git, s3, pvc
    timeout: int | None = None  # upload: seconds to wait for the upload
    url: str | None = None  # git
    ref: str | None = None  # git
    uri: str | None = None  # s3
    sub_path: str | None = None  # pvc


def fetch_argv(source: FetchSource, *, generation: int, max_bytes: int) -> list[str]:
    """`fetch`: the sync pod fetches `source` into `generation`, at most `max_bytes` unpacked."""
    argv = [*PROGRAM, "fetch", "--source", source.source]
    flags = (
        ("--timeout", source.timeout),
        ("--url", source.url),
        ("--ref", source.ref),
        ("--uri", source.uri),
        ("--sub-path", source.sub_path),
    )
    for flag, value in flags:
        if value is not None and value != "":
            argv += [flag, str(value)]
    return [*argv, "--generation", str(generation), "--max-bytes", str(max_bytes)]


def copy_argv(*, min_generation: int, target: str, timeout: int) -> list[str]:
    """`copy`: the workers' init container copies the newest generation ≥ `min_generation` to
    `target`, waiting up to `timeout` seconds for it."""
    return [
        *PROGRAM,
        "copy",
        "--min-generation",
        str(min_generation),
        "--target",
        target,
        "--timeout",
        str(timeout),
    ]


def checkpoints_argv(*, root: str) -> list[str]:
    """`checkpoints`: the plugin's listing pod prints every entry of the checkpoint root as JSON."""
    return [*PROGRAM, "checkpoints", "--root", root]


def prepare_argv(*, target: str) -> list[str]:
    """`prepare`: every worker pod's first init container fills `target` (`/opt/torchrun`)."""
    return [*PROGRAM, "prepare", "--target", target]
