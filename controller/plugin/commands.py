"""The small commands: `list`, `status`, `logs`, `suspend`, `resume`, `delete`.

Each reads or writes the job through the API and prints one result; a missing job is the same
one-line error everywhere (`objects.get_job`). `suspend`/`resume` merge-patch `spec.suspend`
only (the controller removes or recreates the pods and keeps everything else); `delete` removes
the job and, through owner references, what it owns (never a `persist: true` checkpoint claim).
"""

from __future__ import annotations

import datetime

from controller.plugin.console import Console
from controller.plugin.kube import Kube
from controller.plugin.logs import LogFollower, print_logs
from controller.plugin.objects import delete_job, events_about, get_job, job_pods, list_jobs, patch_job
from controller.plugin.views import job_rows, status_text


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def list_command(kube: Kube, console: Console, all_namespaces: bool) -> int:
    jobs = list_jobs(kube, all_namespaces)
    if not jobs:
        where = "any namespace" if all_namespaces else f"namespace {kube.namespace}"
        console.say(f"no jobs in {where}")
        return 0
    console.line(job_rows(jobs, _now(), with_namespace=all_namespaces))
    return 0


def status_command(kube: Kube, console: Console, name: str) -> int:
    job = get_job(kube, name)
    pods = job_pods(kube, name)
    events = events_about(kube, {name} | {p["metadata"]["name"] for p in pods})
    console.line(status_text(job, pods, events, _now()))
    return 0


def logs_command(
    kube: Kube, console: Console, name: str, rank: int | None, all_ranks: bool, follow: bool, previous: bool
) -> int:
    get_job(kube, name)  # a missing job is one error line, not an empty output
    ranks = None if all_ranks else {rank or 0}
    if follow:  # never with previous (main refuses it): a previous pod has ended
        LogFollower(kube, name, ranks, prefix=all_ranks, out=console.line, say=console.say).follow()
    else:
        print_logs(kube, name, ranks, all_ranks, previous, console.line)
    return 0


def set_suspended(kube: Kube, console: Console, name: str, suspend: bool) -> int:
    patch_job(kube, name, {"spec": {"suspend": suspend}})
    console.line(f"job {name} {'suspended' if suspend else 'resumed'}")
    return 0


def delete_command(kube: Kube, console: Console, name: str) -> int:
    delete_job(kube, name)
    console.line(f"job {name} deleted")
    return 0
