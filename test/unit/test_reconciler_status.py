"""The job reconciler writes the status its steps computed on every path (controller.py): a
transient error mid-pass still leaves what was learnt before it, and a step's `Wait` becomes the
user-visible condition. The listers are real caches filled by hand; the REST client is a stand-in
that records writes and fails where a test says (these tests are about the pass, not the API)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api.resources import TORCHRUNJOBS
from controller.cache import Lister, freeze
from controller.cache.store import Indexer
from controller.meta import Resource
from controller.metrics.registry import ControllerMetrics
from controller.rest.errors import ApiError
from controller.rest.resources import EVENTS, SERVICES
from controller.runtime import Result
from controller.runtime.events import EventRecorder
from controller.runtime.status import update_status
from controller.torchrunjob.controller import TorchrunJobReconciler
from controller.torchrunjob.kueue import KueueWorkloads
from controller.torchrunjob.podgroups import PodGroups

READY_QUEUE = {
    "apiVersion": "torchrun.ai/v1alpha1",
    "kind": "TorchrunQueue",
    "metadata": {"name": "q", "uid": "q-1", "generation": 1},
    "spec": {"nodeResources": {"gpus": 8}, "image": "img:1"},
    "status": {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2026-11-25T00:00:00Z",
            }
        ]
    },
}
JOB = {
    "apiVersion": "torchrun.ai/v1alpha1",
    "kind": "TorchrunJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "u-1", "generation": 1, "resourceVersion": "7"},
    "spec": {"jobQueue": "q", "numNodes": 2, "command": "python train.py", "workspace": {"source": "none"}},
}


class Client:
    """Records status writes; `fail_on` (verb, resource) raises the given error."""

    def __init__(self, fail_on: dict[tuple[str, Resource], Exception] | None = None) -> None:
        self.fail_on = fail_on or {}
        self.statuses: list[dict[str, Any]] = []
        self.metrics = ControllerMetrics()

    def _maybe_fail(self, verb: str, resource: Resource) -> None:
        if (verb, resource) in self.fail_on:
            raise self.fail_on[(verb, resource)]

    def update_status(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        assert resource == TORCHRUNJOBS
        self.statuses.append(obj["status"])
        version = str(int(obj["metadata"].get("resourceVersion") or 0) + 1)  # the API server stored it
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}

    def create(self, resource: Resource, obj: dict[str, Any], *_: Any, **__: Any) -> dict[str, Any]:
        self._maybe_fail("create", resource)
        return {**obj, "metadata": {**obj["metadata"], "uid": f"uid-{obj['metadata']['name']}"}}

    def patch(self, resource: Resource, *_: Any, **__: Any) -> dict[str, Any]:
        self._maybe_fail("patch", resource)
        return {}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def event(self, _obj: Any, kind: str, reason: str, _message: str) -> None:
        self.events.append((kind, str(reason)))


def lister(*objs: dict[str, Any]) -> Lister:
    indexer = Indexer()
    for obj in objs:
        indexer.add(freeze(obj))
    return Lister(indexer)


def reconciler(client: Client, recorder: Recorder, services: Lister | None = None) -> TorchrunJobReconciler:
    empty = lister()
    return TorchrunJobReconciler(
        client,  # type: ignore[arg-type]
        jobs=lister(JOB),
        queues=lister(READY_QUEUE),
        worker_jobs=empty,
        services=services or lister(),
        pods=empty,
        claims=empty,
        recorder=recorder,  # type: ignore[arg-type]
        pod_groups=PodGroups(client, informers=None, kueue=KueueWorkloads(client, informers=None)),  # type: ignore[arg-type]
    )


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_transient_error_mid_pass_still_writes_the_status_computed_so_far() -> None:
    boom = ApiError(500, "InternalError", "etcdserver: request timed out")
    client, recorder = Client(fail_on={("create", SERVICES): boom}), Recorder()
    with pytest.raises(ApiError):  # still raised: the runtime retries the key with backoff
        reconciler(client, recorder).reconcile("ns/j")
    (status,) = client.statuses
    assert conditions(status) == {"Admitted": ("True", "Admitted"), "WorkspaceReady": ("True", "NoWorkspace")}
    assert status["nodes"] == 2 and status["gpus"] == 16 and status["startTime"]
    assert recorder.events == []  # admitted on first sight: the condition says so, no Event


def test_a_name_taken_by_a_foreign_object_is_a_condition_naming_it_and_a_backed_off_retry() -> None:
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "j", "namespace": "ns", "uid": "s-9"},
    }
    client, recorder = Client(), Recorder()
    result = reconciler(client, recorder, services=lister(foreign)).reconcile("ns/j")
    assert result == Result(requeue=True)
    (status,) = client.statuses
    assert conditions(status)["Admitted"] == ("False", "NameConflict")
    (admitted,) = [c for c in status["conditions"] if c["type"] == "Admitted"]
    assert "Service ns/j already exists and is not controlled by this TorchrunJob" in admitted["message"]
    assert ("Warning", "NameConflict") in recorder.events


def test_a_job_deleted_mid_pass_during_a_hot_reload_still_gets_its_reload_event() -> None:
    """Generation 2 is in use and the worker pods were made before it synced: the pass evicts
    them (hot reload), and the job's delete lands in the cache while it does. The reload's Event
    is about the job as the pass read it: the real `EventRecorder` gets the job, not `{}`."""
    owned = [{"apiVersion": "torchrun.ai/v1alpha1", "kind": "TorchrunJob", "name": "j", "uid": "u-1",
              "controller": True}]  # fmt: skip
    reloading = {
        **JOB,
        "spec": {**JOB["spec"], "workspace": {"source": "upload", "generation": 2}},
        "status": {"workspaceGeneration": 2, "workspaceSyncTime": "2026-11-25T01:00:00Z"},
    }
    claim = {"metadata": {"name": "j-workspace", "namespace": "ns", "uid": "c-1", "ownerReferences": owned}}
    worker_job = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "w-1", "ownerReferences": owned,
                     "annotations": {"torchrun.ai/restart": "0", "torchrun.ai/workspace-generation": "1"}},
        "spec": {"parallelism": 2},
    }  # fmt: skip
    ready = [{"type": "Ready", "status": "True"}]
    pods = [
        {"metadata": {"name": f"j-{rank}", "namespace": "ns", "uid": f"p-{rank}",
                      "labels": {"torchrun-job-name": "j"}, "creationTimestamp": "2026-11-25T00:00:00Z",
                      "ownerReferences": [{"kind": "Job", "name": "j", "uid": "w-1", "controller": True}]},
         "status": {"phase": "Running", "conditions": ready}}
        for rank in (0, 1)
    ]  # fmt: skip
    jobs = Indexer()
    jobs.add(freeze(reloading))

    class Evicting(Client):
        def __init__(self) -> None:
            super().__init__()
            self.evicted: list[str] = []
            self.events: list[dict[str, Any]] = []

        def evict(self, _resource: Resource, name: str, *_: Any, **__: Any) -> None:
            self.evicted.append(name)
            jobs.delete(freeze(reloading))  # the job's delete event lands while the pass works

        def create(self, resource: Resource, obj: dict[str, Any], *_: Any, **__: Any) -> dict[str, Any]:
            if resource == EVENTS:
                self.events.append(obj)
            return super().create(resource, obj)

    client = Evicting()
    recorder = EventRecorder(client)  # type: ignore[arg-type]
    try:
        TorchrunJobReconciler(
            client,  # type: ignore[arg-type]
            jobs=Lister(jobs),
            queues=lister(READY_QUEUE),
            worker_jobs=lister(worker_job),
            services=lister(),
            pods=lister(*pods),
            claims=lister(claim),
            recorder=recorder,
            pod_groups=PodGroups(client, informers=None, kueue=KueueWorkloads(client, informers=None)),  # type: ignore[arg-type]
        ).reconcile("ns/j")
        recorder.flush()
    finally:
        recorder.shutdown()
    assert sorted(client.evicted) == ["j-0", "j-1"]
    (event,) = [e for e in client.events if e["reason"] == "WorkspaceReloaded"]
    assert (event["involvedObject"]["name"], event["involvedObject"]["uid"]) == ("j", "u-1")
    assert event["message"].startswith("workspace generation 2 synced: restarting 2 worker pod(s)")


def test_a_status_write_that_stored_nothing_is_no_write() -> None:
    """The API server answers with the cached resourceVersion when it pruned every field that
    changed (a CRD older than the controller): no watch event follows, so the caller must not wait
    for one (`JobUpdater.cache_behind` would hold the job forever)."""

    class Pruning(Client):
        def update_status(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
            self.statuses.append(obj["status"])
            return {**obj, "status": JOB.get("status", {})}  # stored as it was: same version

    pruning = Pruning()
    assert update_status(pruning, TORCHRUNJOBS, JOB, {"inPlaceRunningGeneration": 0}) is False
    assert pruning.statuses == [{"inPlaceRunningGeneration": 0}]  # it was sent
    assert update_status(Client(), TORCHRUNJOBS, JOB, {"inPlaceRunningGeneration": 0}) is True
