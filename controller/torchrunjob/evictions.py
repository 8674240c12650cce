"""Evicting a worker Job's pods: the one way the controller restarts workers on purpose.

`evict_live_workers` evicts, through the Eviction API, the pods that `worker_job` controls (UID of
its controller reference), that are not terminating and have not ended, and that `select` picks.
Evicted pods carry the DisruptionTarget condition, which the worker Job's podFailurePolicy ignores,
so neither a hot reload nor an elastic shrink counts as a failure. A pod that is already gone, or
was replaced under its name (UID precondition), is skipped. Returns how many were evicted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from controller.meta import Obj, is_controlled_by
from controller.pods import is_live
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import PODS


def live_workers(pods: Iterable[Obj], worker_job: Obj) -> list[Obj]:
    """The pods `worker_job` controls that still run or wait to (not terminating, not ended)."""
    uid = worker_job["metadata"]["uid"]
    return [pod for pod in pods if is_controlled_by(pod, uid) and is_live(pod)]


def evict_live_workers(
    client: RESTClient, pods: Iterable[Obj], worker_job: Obj, select: Callable[[Obj], bool]
) -> int:
    evicted = 0
    for pod in live_workers(pods, worker_job):
        if not select(pod):
            continue
        meta = pod["metadata"]
        try:
            client.evict(PODS, meta["name"], meta["namespace"], uid=meta.get("uid"))
            evicted += 1
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise
    return evicted
