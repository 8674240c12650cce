"""Pack a project directory for `submit` and `sync`, and put one generation into a job's workspace.

`packed(root, force)` scans, refuses (all reasons at once, before anything is sent) and writes
the archive to a temporary file that is removed when the block ends. `send_generation` waits
for the sync pod `<job>-sync-<G>` to run (saying what the job waits for meanwhile), then
uploads with a progress bar. Both are shared by `submit` (generation 0) and `sync` (the next).
With `delta` (`sync`) it first offers the tree's manifest and sends only what the workspace lacks
(`controller.plugin.delta`); when that cannot publish, for whatever reason (said in one line), the
whole archive follows into the same generation. Either way it says how many bytes went each way.
`job_workspace` reads where a job's code comes from through the API types, exactly as the
controller does (the seed's deprecated `volumes.workspace` included).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.api import InvalidObjectError, TorchrunJob, Workspace
from controller.meta import is_controlled_by
from controller.plugin.archive import Archive, write_archive
from controller.plugin.console import Console
from controller.plugin.delta import Sent, send_delta
from controller.plugin.errors import PluginError
from controller.plugin.kube import Kube
from controller.plugin.objects import JSON, get_pod
from controller.plugin.pack import DEFAULT_SIZE_LIMIT, Tree, human_size, refusals, scan
from controller.plugin.upload import Traffic, upload
from controller.plugin.watch import Waiting, held_up, pod_ended, wait
from controller.sync.protocol import sync_pod_name


@dataclass(frozen=True)
class Packed:
    """A checked tree and its archive on disk."""

    tree: Tree
    archive: Archive
    path: Path

    def summary(self) -> str:
        a = self.archive
        return f"{a.files} files, {human_size(a.bytes)} ({human_size(a.size)} compressed), sha256 {a.sha256}"


def checked_tree(root: Path, force: bool, limit: int = DEFAULT_SIZE_LIMIT) -> Tree:
    """Scan `root`; `PluginError` listing every refusal (see `pack.refusals`)."""
    if not root.is_dir():
        raise PluginError(f"{root} is not a directory")
    tree = scan(root)
    problems = refusals(tree, limit=limit, force=force)
    if problems:
        raise PluginError("nothing was sent: " + "\n".join(problems))
    return tree


@contextmanager
def packed(root: Path, force: bool, limit: int = DEFAULT_SIZE_LIMIT) -> Iterator[Packed]:
    """The checked archive of `root` in a temporary file, removed afterwards."""
    tree = checked_tree(root, force, limit)
    with tempfile.TemporaryDirectory(prefix="kubectl-torchrun-") as tmp:
        path = Path(tmp) / "workspace.tar.gz"
        with open(path, "wb") as f:
            archive = write_archive(tree, f)
        yield Packed(tree=tree, archive=archive, path=path)


SYNC_POD_POLL = 0.25
"""Seconds between looks at the sync pod the upload waits for: it runs a second or two after it is
made, and each second of the wait is a second of the hot reload (two GETs a look, for seconds)."""


def _sync_pod_running(kube: Kube, job: JSON, generation: int) -> bool | Waiting | None:
    """True once the sync pod runs; while the job is held up, None (its conditions say why),
    else what the pod is doing. A pod of that name the job does not control (its controller owner
    reference's UID) is refused: the upload never goes into a pod someone else made."""
    name = sync_pod_name(job["metadata"]["name"], generation)
    pod = get_pod(kube, name)
    if pod is not None and not is_controlled_by(pod, job["metadata"]["uid"]):
        raise PluginError(
            f"pod {name} is not this job's sync pod (it is not controlled by TorchrunJob "
            f"{job['metadata']['name']}, UID {job['metadata']['uid']}): nothing was uploaded into it"
        )
    if pod is not None:
        ended = pod_ended(pod)
        if ended is not None:
            raise PluginError(
                f"sync pod {name} ended before the upload ({ended}); "
                f"retry with `kubectl torchrun sync {job['metadata']['name']}`"
            )
        if (pod.get("status") or {}).get("phase") == "Running":
            return True
    if held_up(job) is not None:
        return None
    return Waiting(f"sync pod {name} " + ("does not exist yet" if pod is None else "is not running yet"))


def send_generation(
    kube: Kube, job: str, generation: int, pack: Packed, console: Console, *, delta: bool = False
) -> dict[str, Any]:
    """Wait for `<job>-sync-<generation>` to run, then send `pack` into it (with `delta`, only what
    the workspace lacks, else or failing that the whole archive); the marker."""
    pod = sync_pod_name(job, generation)
    console.say(f"waiting for the sync pod {pod}")
    wait(kube, job, lambda current: _sync_pod_running(kube, current, generation), console.say, SYNC_POD_POLL)
    traffic = Traffic()
    if delta:
        sent = send_delta(kube, pod, generation, pack.tree, pack.archive, pack.path.parent, traffic, _ignore)
        if isinstance(sent, Sent):
            console.say(
                f"generation {generation} uploaded: {sent.files} of {pack.archive.files} files sent, the "
                f"others kept from generation {sent.base}; {_traffic(traffic)}"
            )
            return sent.marker
        console.say(f"sending the whole archive: {sent.reason}")
    description = f"uploading {pack.archive.files} files"
    with console.progress(pack.archive.size, description) as advance:
        marker = upload(kube, job, generation, pack.archive, pack.path, advance, traffic)
    console.say(f"generation {generation} uploaded: {pack.summary()}; {_traffic(traffic)}")
    return marker


def _traffic(traffic: Traffic) -> str:
    return f"{traffic.sent} bytes sent, {traffic.received} received"


def _ignore(_: int) -> None:
    pass


def job_workspace(job: JSON) -> Workspace:
    """The job's workspace exactly as the controller reads it (`TorchrunJob.spec.workspace`: the
    seed's `volumes.workspace` spelling included); `PluginError` if the job cannot be parsed."""
    try:
        return TorchrunJob.from_json(job).spec.workspace
    except InvalidObjectError as exc:
        name = (job.get("metadata") or {}).get("name")
        raise PluginError(
            f'job "{name}" cannot be read by this kubectl-torchrun ({exc.message}); '
            "is the plugin older than the controller?"
        ) from None


def wanted_generation(job: JSON) -> int:
    return job_workspace(job).generation


def workspace_source(job: JSON) -> str:
    """The job's code source: upload, git, s3, pvc or none."""
    return job_workspace(job).source.value
