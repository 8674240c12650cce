"""`kubectl torchrun submit`: the current directory becomes a running job, no image build.

In order, each step only once the previous one succeeded: pack and check the directory (a
refusal sends nothing); `--dry-run` stops here, printing the manifest and the file list; check
the queue exists (and allows `env` when `--env` is given) so a typo is an error, not a job
waiting forever; create the job; wait for its sync pod and upload generation 0; `--detach`
stops here; wait for the workspace, follow rank 0's logs until the job ends and exit with its
outcome (0 succeeded, 1 failed, with the reason). Every wait says what the job waits for, one
`waiting: ...` line per change (the queue, the claim, the scheduler's words for workers that
cannot be placed). An upload that fails leaves the job in place
(the error says to retry with `sync`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from controller.api import JobConditionType, Overridable
from controller.plugin.console import Console
from controller.plugin.errors import PluginError
from controller.plugin.kube import Kube
from controller.plugin.logs import LogFollower
from controller.plugin.manifest import SubmitSpec, job_manifest
from controller.plugin.objects import JSON, create_job, get_queue
from controller.plugin.pack import Tree, human_size
from controller.plugin.watch import condition, outcome, wait
from controller.plugin.workspace import packed, send_generation


def file_list(tree: Tree) -> str:
    """The dry run's file list: size and path of each file, then the total."""
    lines = [f"{human_size(e.size):>10}  {e.path}" for e in tree.files]
    lines += [f"{len(tree.files)} files, {human_size(tree.total_bytes)}"]
    return "\n".join(lines)


def check_queue(kube: Kube, spec: SubmitSpec) -> None:
    """`PluginError` if the queue does not exist, or refuses `env` overrides that `spec` sets."""
    queue = get_queue(kube, spec.queue)
    if queue is None:
        raise PluginError(f'queue "{spec.queue}" not found (kubectl get torchrunqueues lists the queues)')
    allowed = (queue.get("spec") or {}).get("allowOverrides") or []
    if spec.env and Overridable.ENV.value not in allowed:
        raise PluginError(
            f'queue "{spec.queue}" does not allow --env: its spec.allowOverrides must list "env" '
            "(ask the queue's owner), or submit without --env"
        )


def _workspace_ready(job: JSON) -> bool | None:
    c = condition(job, JobConditionType.WORKSPACE_READY)
    return True if c is not None and c.get("status") == "True" else None


def submit(
    spec: SubmitSpec,
    root: Path,
    connect: Callable[[], Kube],
    console: Console,
    *,
    dry_run: bool,
    detach: bool,
    force: bool,
) -> int:
    """Run `submit` (see the module docstring); the exit code."""
    manifest = job_manifest(spec, root.resolve().name)
    with packed(root, force) as pack:
        if dry_run:
            console.line(yaml.safe_dump(manifest, sort_keys=False).rstrip())
            console.line("---")
            console.line(file_list(pack.tree))
            console.line(f"archive: {pack.summary()}")
            return 0
        kube = connect()
        check_queue(kube, spec)
        console.say(f"packed {root.resolve()}: {pack.summary()}")
        job = create_job(kube, manifest)
        name = job["metadata"]["name"]
        console.say(f"created job {name} in namespace {kube.namespace}")
        send_generation(kube, name, 0, pack, console)
    if detach:
        console.say(f"detached: kubectl torchrun logs {name} --follow; kubectl torchrun status {name}")
        return 0
    wait(kube, name, _workspace_ready, console.say)
    console.say(f"workspace ready; following rank 0 of {name} until the job ends")
    final = LogFollower(kube, name, {0}, prefix=False, out=console.line, say=console.say).follow()
    ended = outcome(final)
    assert ended is not None  # follow() returns only a terminal job
    console.say(ended[1])
    return ended[0]
