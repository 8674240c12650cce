"""`kubectl torchrun stack NAME [--rank N]`: every rank's Python stack, through the reporter sidecar.

For each running worker pod of the job (one rank's, with `--rank`), in rank order, it runs the
sidecar's own command as the pod spec names it, plus `stack` (today `python -m
controller.progress.sidecar.reporter stack`, `progress/sidecar/stack.py`; a pod made by an older
controller names its older module, so plugin and pods of different versions still agree), in the pod's
`progress-reporter` sidecar over pods/exec: py-spy, in the sidecar that shares the pod's process
namespace and holds `SYS_PTRACE`, dumps every training process, each line prefixed `[rank R pid
P]`. One line when it cannot: the queue disables stack dumps (`debug.stackDumps: false`), no
worker pod runs (or not that rank's), or the pod has no reporter (made before this version).
"""

from __future__ import annotations

from controller.api.labels import WORKER_ROLE
from controller.plugin.console import Console
from controller.plugin.errors import PluginError
from controller.plugin.kube import Kube
from controller.plugin.logs import rank_of
from controller.plugin.objects import JSON, get_job, get_queue, job_pods
from controller.plugin.upload import run_command

REPORTER = "progress-reporter"
TIMEOUT = 120.0


def stack_command(kube: Kube, console: Console, name: str, rank: int | None) -> int:
    job = get_job(kube, name)
    queue = get_queue(kube, (job.get("spec") or {}).get("jobQueue", "")) or {}
    if ((queue.get("spec") or {}).get("debug") or {}).get("stackDumps") is not True:
        raise PluginError(
            f"queue {queue['metadata']['name']} does not allow stack dumps "
            "(a platform engineer sets debug.stackDumps: true on it; new pods get it)"
        )
    pods = running_workers(job_pods(kube, name, role=WORKER_ROLE), rank)
    if not pods:
        which = f"rank {rank}" if rank is not None else "any rank"
        raise PluginError(f"job {name} has no running worker pod for {which}")
    failed = 0
    for pod in pods:
        pod_name = pod["metadata"]["name"]
        command = reporter_command(pod)
        if command is None:
            console.say(f"pod {pod_name} has no {REPORTER} sidecar (made before it existed): no stack")
            failed += 1
            continue
        outcome = run_command(kube, pod_name, REPORTER, [*command, "stack"], TIMEOUT)
        for line in (outcome.stdout + outcome.stderr).splitlines():
            console.line(line)
        if outcome.exit_code != 0:
            failed += 1
    return 1 if failed else 0


def reporter_command(pod: JSON) -> list[str] | None:
    """The command the pod's reporter sidecar runs, as its spec says; None without the sidecar."""
    for container in pod["spec"].get("initContainers") or ():
        if container.get("name") == REPORTER:
            return [str(word) for word in container.get("command") or ()] or None
    return None


def running_workers(pods: list[JSON], rank: int | None) -> list[JSON]:
    """The running, not deleted worker pods (of `rank` only, when given), by rank."""
    chosen = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and (rank is None or rank_of(p) == rank)
    ]
    return sorted(chosen, key=lambda p: (rank_of(p) or 0, p["metadata"]["name"]))
