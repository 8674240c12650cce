"""Ownership is proven by the controller owner reference and its UID, never by a label or a name:
the GC's proof, the job controller's event mapping, and the queue fan-out rule."""

from __future__ import annotations

from typing import Any, cast

from controller.api import JOB_LABEL
from controller.api.resources import JOB_QUEUE_INDEX, job_queue_index
from controller.cache import Indexer, Lister, freeze
from controller.clock import utc_now
from controller.gc.collector import GarbageCollector, Owner, node_lost
from controller.meta import controller_of, is_controlled_by
from controller.metrics.registry import ControllerMetrics
from controller.rest.resources import JOBS, PODS
from controller.torchrunjob.status import invalid_status
from controller.torchrunjob.wiring import Handlers

NS = "ns"


def ref(kind: str, name: str, uid: str, *, controller: bool = True) -> dict[str, Any]:
    api_version = "torchrun.ai/v1alpha1" if kind == "TorchrunJob" else "batch/v1"
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": controller}


def obj(
    name: str,
    *refs: dict[str, Any],
    uid: str = "",
    labels: dict[str, str] | None = None,
    rv: str = "1",
    **extra: Any,
) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid or f"uid-{name}", "resourceVersion": rv}
    if refs:
        meta["ownerReferences"] = list(refs)
    if labels:
        meta["labels"] = labels
    return freeze({"metadata": meta, **extra})


def lister(*objs: Any, indexers: Any = None) -> Lister:
    idx = Indexer() if indexers is None else Indexer(indexers)
    for o in objs:
        idx.add(o)
    return Lister(idx)


# -- metav1-style helpers -----------------------------------------------------------------------


def test_only_a_controller_reference_with_the_uid_proves_control() -> None:
    assert is_controlled_by(obj("a", ref("TorchrunJob", "j", "u1")), "u1")
    assert not is_controlled_by(obj("a", ref("TorchrunJob", "j", "u1")), "u2")
    assert not is_controlled_by(obj("a", ref("TorchrunJob", "j", "u1", controller=False)), "u1")
    assert not is_controlled_by(obj("a", labels={JOB_LABEL: "j"}), "u1")
    assert not is_controlled_by(obj("a"), "")
    assert (
        controller_of(obj("a", ref("Job", "x", "u", controller=False), ref("TorchrunJob", "j", "u1")))["uid"]
        == "u1"
    )


# -- the garbage collector's proof -----------------------------------------------------------------


def collector(jobs: Lister, worker_jobs: Lister, pods: Lister) -> GarbageCollector:
    client: Any = None  # owner_of reads only the caches
    return GarbageCollector(
        cast(Any, client), jobs, cast(Any, None), {JOBS: worker_jobs, PODS: pods}, metrics=ControllerMetrics()
    )


def test_gc_proof_follows_controller_references_not_labels() -> None:
    worker = obj("train", ref("TorchrunJob", "train", "tj-1"), uid="job-1")
    pods = [
        obj("mine", labels={JOB_LABEL: "train"}),  # a user's pod reusing our label
        obj("train-0", ref("Job", "train", "job-1"), labels={JOB_LABEL: "train"}),
        obj("stale-0", ref("Job", "train", "job-OLD"), labels={JOB_LABEL: "train"}),  # another Job's
        obj("someone", ref("Job", "other", "job-9"), labels={JOB_LABEL: "train"}),
    ]
    gc = collector(lister(), lister(worker), lister(*pods))
    assert gc.owner_of(pods[0]) is None
    assert gc.owner_of(pods[1]) == Owner(NS, "train", "tj-1")
    assert gc.owner_of(pods[2]) is None
    assert gc.owner_of(pods[3]) is None
    assert gc.owner_of(worker) == Owner(NS, "train", "tj-1")
    # a Job controlled by something else is not ours, nor are its pods
    theirs = obj("other", ref("Job", "cron", "c-1"), uid="job-9")
    assert collector(lister(), lister(theirs), lister()).owner_of(pods[3]) is None


def test_gc_remembers_a_worker_job_after_it_is_deleted_while_its_pods_remain() -> None:
    worker = obj("train", ref("TorchrunJob", "train", "tj-1"), uid="job-1")
    pod = obj("train-0", ref("Job", "train", "job-1"), labels={JOB_LABEL: "train"})
    jobs_idx, pods_idx = Indexer(), Indexer()
    jobs_idx.add(worker)
    pods_idx.add(pod)
    gc = collector(lister(), Lister(jobs_idx), Lister(pods_idx))
    gc._remember_worker_jobs()
    jobs_idx.delete(worker)
    gc._remember_worker_jobs()
    assert gc.owner_of(pod) == Owner(NS, "train", "tj-1")
    pods_idx.delete(pod)
    gc._remember_worker_jobs()  # no pod refers to it any more: forgotten
    assert gc._worker_jobs == {}


def test_a_node_is_lost_only_when_gone_out_of_service_or_notready_past_the_grace() -> None:
    now = utc_now().timestamp()
    long_ago = "2020-01-01T00:00:00Z"
    just_now = utc_now().strftime("%Y-%m-%dT%H:%M:%SZ")

    def node(ready: str, since: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
        cond = {"type": "Ready", "status": ready, "lastTransitionTime": since}
        return {"spec": {"taints": taints or []}, "status": {"conditions": [cond]}}

    assert node_lost("n", None, now, 60) == "node n is gone"
    assert node_lost("n", node("True", long_ago), now, 60) is None
    assert node_lost("n", node("False", just_now), now, 60) is None
    assert node_lost("n", node("Unknown", long_ago), now, 60) == f"node n is NotReady since {long_ago}"
    tainted = node("True", long_ago, [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}])
    assert "out-of-service" in (node_lost("n", tainted, now, 60) or "")
    assert node_lost("n", {"metadata": {"name": "n"}}, now, 60) is None  # no status yet: not lost


# -- the job controller's event mapping ---------------------------------------------------------------


def handlers(jobs: Lister, worker_jobs: Lister) -> tuple[Handlers, list[str]]:
    keys: list[str] = []
    return Handlers(keys.append, jobs, worker_jobs), keys


def test_owned_objects_map_to_their_job_by_controller_reference() -> None:
    worker = obj("train", ref("TorchrunJob", "train", "tj-1"), uid="job-1")
    h, keys = handlers(lister(), lister(worker))
    h.owned(obj("svc", ref("TorchrunJob", "train", "tj-1"), labels={JOB_LABEL: "other"}))
    h.owned(obj("train-0", ref("Job", "train", "job-1")))
    h.owned(obj("x-0", ref("Job", "train", "job-2")))  # a Job of that name but another UID
    h.owned(obj("mine", labels={JOB_LABEL: "train"}))  # label only
    assert keys == [f"{NS}/train", f"{NS}/train"]


def test_a_resync_replay_of_an_owned_object_enqueues_nothing_a_change_does() -> None:
    h, keys = handlers(lister(), lister())
    before = obj("svc", ref("TorchrunJob", "train", "tj-1"), rv="5")
    h.owned_updated(before, before)  # the periodic resync hands the cached object back
    assert keys == []
    h.owned_updated(before, obj("svc", ref("TorchrunJob", "train", "tj-1"), rv="6"))
    assert keys == [f"{NS}/train"]


def test_a_pod_the_job_controls_itself_is_enqueued_at_once_a_workers_pod_batched() -> None:
    worker = obj("train", ref("TorchrunJob", "train", "tj-1"), uid="job-1")
    now: list[str] = []
    batched: list[str] = []
    h = Handlers(now.append, lister(), lister(worker), enqueue_batched=batched.append)
    sync = obj("train-sync-1", ref("TorchrunJob", "train", "tj-1"), rv="5")
    h.pod_updated(sync, sync)  # a resync's replay: nothing
    h.pod_updated(sync, obj("train-sync-1", ref("TorchrunJob", "train", "tj-1"), rv="6"))
    assert (now, batched) == ([f"{NS}/train"], [])
    h.pod_updated(
        obj("train-0", ref("Job", "train", "job-1"), rv="1"),
        obj("train-0", ref("Job", "train", "job-1"), rv="2"),
    )
    h.pod_updated(
        obj("x", labels={JOB_LABEL: "train"}, rv="1"), obj("x", labels={JOB_LABEL: "train"}, rv="2")
    )
    assert (now, batched) == ([f"{NS}/train"], [f"{NS}/train"])  # the label alone: nothing


def test_a_foreign_objects_deletion_wakes_only_a_job_waiting_on_its_name() -> None:
    waiting = obj(
        "train",
        spec={"jobQueue": "q"},
        status={"conditions": [{"type": "Admitted", "reason": "NameConflict"}]},
    )
    running = obj(
        "other", spec={"jobQueue": "q"}, status={"conditions": [{"type": "Admitted", "reason": "Admitted"}]}
    )
    h, keys = handlers(lister(waiting, running), lister())
    h.owned_deleted(obj("train", labels={JOB_LABEL: "train"}))
    h.owned_deleted(obj("other", labels={JOB_LABEL: "other"}))
    h.owned_deleted(obj("nolabel"))
    assert keys == [f"{NS}/train"]


def test_queue_updates_fan_out_only_when_spec_or_readiness_changes() -> None:
    jobs = [obj(f"j{i}", spec={"jobQueue": "q"}) for i in range(3)]
    h, keys = handlers(lister(*jobs, indexers={JOB_QUEUE_INDEX: job_queue_index}), lister())

    def queue(generation: int, ready: str, reason: str, counts: int) -> Any:
        cond = {"type": "Ready", "status": ready, "reason": reason}
        return freeze(
            {
                "metadata": {"name": "q", "generation": generation},
                "status": {"conditions": [cond], "jobs": {"total": counts}},
            }
        )

    h.queue_updated(queue(1, "True", "Ready", 1), queue(1, "True", "Ready", 2))  # a count write
    assert keys == []
    h.queue_updated(queue(1, "True", "Ready", 2), queue(2, "True", "Ready", 2))  # spec edited
    assert sorted(keys) == [f"{NS}/j0", f"{NS}/j1", f"{NS}/j2"]
    keys.clear()
    h.queue_updated(queue(2, "True", "Ready", 2), queue(2, "False", "StorageClassNotFound", 2))
    assert len(keys) == 3


# -- an unparseable job keeps its condition's time ------------------------------------------------------


def test_an_invalid_jobs_status_is_stable_across_passes() -> None:
    raw = freeze({"metadata": {"name": "j", "namespace": NS, "generation": 3}, "spec": {"numNodes": "x"}})
    first = invalid_status(raw, "spec.numNodes: not an integer", utc_now())
    written = freeze({**raw, "status": first})
    later = utc_now().replace(year=utc_now().year + 1)
    again = invalid_status(written, "spec.numNodes: not an integer", later)
    assert again == first  # equal → update_status writes nothing
    cond = first["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == (
        "Admitted",
        "False",
        "InvalidSpec",
        3,
    )
