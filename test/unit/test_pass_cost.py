"""What makes a reconcile pass cheap and a job's writes few (issue #21): the pod index behind
`Lister.list`, `same_json`, the updater's memo and held worker counts, counts read from pods, and
which condition transitions are worth an Event."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from typing import Any

from jobspecs import job, queue, worker

from controller.api import ConditionStatus, JobConditionType, set_condition
from controller.cache import Lister, freeze, same_json
from controller.cache.store import Indexer, label_index, label_index_name
from controller.cache.transforms import slim_job
from controller.meta import is_controlled_by
from controller.torchrunjob import status as st
from controller.torchrunjob.manifests.common import restart_of
from controller.torchrunjob.updater import JobUpdater, QueueParses

NOW = datetime(2026, 11, 25, tzinfo=timezone.utc)


def pod(name: str, ns: str, labels: dict[str, str], **status: Any) -> dict[str, Any]:
    meta = {
        "name": name,
        "namespace": ns,
        "labels": labels,
        "ownerReferences": [{"uid": "w", "controller": True}],
    }
    return {"metadata": meta, "status": status}


def test_a_label_index_answers_a_selector_with_the_same_objects_as_a_scan() -> None:
    indexed = Indexer(
        {**{"namespace": lambda o: [o["metadata"]["namespace"]]}, label_index_name("j"): label_index("j")}
    )
    scanned = Indexer({"namespace": lambda o: [o["metadata"]["namespace"]]})
    pods = [
        pod("a-0", "a", {"j": "a", "role": "worker"}),
        pod("a-s", "a", {"j": "a", "role": "sync"}),
        pod("b-0", "a", {"j": "b", "role": "worker"}),
        pod("a-0", "b", {"j": "a", "role": "worker"}),  # same job name, other namespace
        pod("x", "a", {"role": "worker"}),  # no job label
    ]
    for p in pods:
        indexed.add(freeze(p))
        scanned.add(freeze(p))
    assert label_index("j") is label_index("j")  # one function per label: a shared informer may ask twice
    for selector in ({"j": "a"}, {"j": "a", "role": "sync"}, {"j": "c"}, {"role": "worker"}):
        for ns in ("a", "b"):
            got = sorted(o["metadata"]["name"] for o in Lister(indexed).list(ns, selector))
            want = sorted(o["metadata"]["name"] for o in Lister(scanned).list(ns, selector))
            assert got == want, (ns, selector)
    indexed.delete(freeze(pods[0]))
    assert [o["metadata"]["name"] for o in Lister(indexed).list("a", {"j": "a"})] == ["a-s"]


def test_same_json_is_equality_of_the_thawed_values() -> None:
    stored = freeze({"a": [1, {"b": None}], "c": "x"})
    assert same_json(stored, {"a": [1, {"b": None}], "c": "x"})
    for other in (
        {"a": [1, {"b": None}]},
        {"a": [1, {"b": 0}], "c": "x"},
        {"a": [1], "c": "x"},
        {"a": 1, "c": "x"},
    ):
        assert not same_json(stored, other), other
    assert not same_json(freeze({"a": []}), {"a": {}})


def test_the_memo_recomputes_only_when_the_version_changes_and_never_keeps_an_error() -> None:
    u = JobUpdater("ns/j", "u")
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert u.memo("x", "1", compute) == 1
    assert u.memo("x", "1", compute) == 1
    assert u.memo("x", "2", compute) == 2
    assert u.memo("y", "2", compute) == 3  # names are separate

    def boom() -> int:
        raise ValueError("bad")

    for _ in range(2):
        try:
            u.memo("z", "1", boom)
        except ValueError:
            pass
        else:
            raise AssertionError("the error was remembered")


def test_worker_counts_are_held_up_to_the_batch_and_a_write_ends_the_hold() -> None:
    u = JobUpdater("ns/j", "u")
    assert u.hold_counts(100.0, 2.0) == 2.0  # first held now
    assert u.hold_counts(101.5, 2.0) == 0.5
    assert u.hold_counts(102.0, 2.0) is None  # due
    u.status_written("7")
    assert u.hold_counts(110.0, 2.0) == 2.0  # a new hold starts after a write


def test_active_and_ready_are_counted_from_the_attempts_pods_the_finished_from_the_job() -> None:
    ready = {"type": "Ready", "status": "True"}
    pods = [
        pod("j-0", "ns", {}, phase="Running", conditions=[ready]),
        pod("j-1", "ns", {}, phase="Pending", conditions=[{"type": "Ready", "status": "False"}]),
        pod("j-2", "ns", {}, phase="Failed", conditions=[ready]),
        {**pod("j-3", "ns", {}, phase="Running", conditions=[ready])},
    ]
    pods[3]["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    worker = {"status": {"active": 0, "ready": 0, "succeeded": 3, "failed": 1}}
    counts = st.worker_counts(worker, pods)
    assert (counts.active, counts.ready, counts.succeeded, counts.failed) == (2, 1, 3, 1)
    assert st.worker_counts({"status": {"active": 2, "ready": 1}}).ready == 1  # no pods given: the Job's


def test_a_status_that_differs_only_in_worker_counts_and_their_messages_is_routine() -> None:
    j = job(num_nodes=2)
    p = st.StatusUpdate(j, NOW)
    j = dataclasses.replace(j, status=p.final())
    p = st.StatusUpdate(j, NOW)
    assert not p.routine_only()  # nothing changed at all
    p.set(workers=st.WorkerCounts(active=2))
    assert p.routine_only()
    p.cond(JobConditionType.RUNNING, False, "WorkersStarting", "0/2 worker pods are running")
    assert not p.routine_only()  # a condition appeared too: written at once

    j = dataclasses.replace(j, status=p.final())
    p = st.StatusUpdate(j, NOW)
    p.cond(JobConditionType.RUNNING, False, "WorkersStarting", "1/2 worker pods are running")
    assert p.routine_only()  # the same status and reason, only the message quotes a new count
    p.cond(JobConditionType.RUNNING, False, "Unschedulable", "pod j-1: 0/4 nodes")
    assert not p.routine_only()  # a new reason: written at once
    p = st.StatusUpdate(j, NOW)
    p.cond(JobConditionType.RUNNING, True, "AllWorkersRunning", "2/2 worker pods are running")
    assert not p.routine_only()


def test_admitted_on_first_sight_is_no_event_but_after_a_wait_it_is() -> None:
    admitted = set_condition((), JobConditionType.ADMITTED, True, "Admitted", "queue q", 1, NOW)
    waited = set_condition((), JobConditionType.ADMITTED, False, "QueueNotReady", "not yet", 1, NOW)
    assert st.transition_events((), admitted) == []
    events = st.transition_events(waited, admitted)
    assert [(e.warning, e.reason) for e in events] == [(False, "Admitted")]
    assert admitted[0].status is ConditionStatus.TRUE


def test_every_job_of_a_queue_version_shares_one_parse_of_it() -> None:
    parses = QueueParses()
    raw = freeze(to_json_queue())
    first = parses.parse(raw)
    assert parses.parse(freeze(to_json_queue())) is first  # same uid and resourceVersion
    changed = freeze({**to_json_queue(), "metadata": {**to_json_queue()["metadata"], "resourceVersion": "9"}})
    assert parses.parse(changed) is not first


def to_json_queue() -> dict[str, Any]:
    return {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunQueue",
        "metadata": {"name": "q", "uid": "q-1", "resourceVersion": "8", "generation": 1},
        "spec": {"nodeResources": {"gpus": 8}, "image": "img:1"},
    }


def test_a_cached_worker_job_keeps_what_the_controller_reads_and_not_its_pod_template() -> None:
    manifest = worker(job(num_nodes=4), queue(), restart=2, suspend=True, parallelism=3, generation=5)
    manifest["metadata"].update(
        uid="w-1", resourceVersion="9", ownerReferences=[{"uid": "tj", "controller": True}]
    )
    manifest["status"] = {"active": 3, "ready": 2, "conditions": [{"type": "Suspended", "status": "False"}]}
    slim = slim_job(manifest)
    assert "template" not in slim["spec"]
    assert slim["spec"]["suspend"] is True and slim["spec"]["parallelism"] == 3
    assert slim["status"] == manifest["status"]
    assert slim["metadata"]["annotations"] == manifest["metadata"]["annotations"]
    assert restart_of(slim) == 2
    assert is_controlled_by(slim, "tj")
    full, kept = len(json.dumps(manifest)), len(json.dumps(slim))
    assert kept * 3 < full, (kept, full)
