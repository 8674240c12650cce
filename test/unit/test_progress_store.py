"""The leader's report store (one pass per change, not per report; attempts never mixed), the
proof of a reporter's identity (TokenReview status and owner chain, as a table), and the
status.progress built from the reports."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from controller.progress.identity import AUDIENCE, PodIdentity, Refusal, Reporter, identity_of, prove
from controller.progress.record import Record
from controller.progress.store import ProgressStore
from controller.progress.summary import progress_of

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def report(
    store: ProgressStore, step: int, *, rank: int = 0, age: float = 0.0, at: float = 0.0, **kw: Any
) -> bool:
    args: dict[str, Any] = {"job_uid": "job-uid", "attempt": "worker-uid", **kw}
    return store.report(
        "ns/job",
        rank=rank,
        record=Record(step=step, total_steps=1000),
        seconds_since_change=age,
        now=T0 + timedelta(seconds=at),
        **args,
    )


def test_only_the_first_change_since_a_settled_pass_enqueues() -> None:
    store = ProgressStore()
    assert report(store, 1) is True
    assert report(store, 2, at=1) is False  # unsettled: the pass to come reads it
    view = store.view("ns/job")
    assert view is not None and view.ranks[0].record.step == 2
    assert store.settle("ns/job", view.version) is True
    assert report(store, 2, at=2, age=1.0) is False  # the same record told again: nothing moved
    assert report(store, 3, at=3) is True


def test_a_report_during_the_pass_leaves_the_job_unsettled() -> None:
    store = ProgressStore()
    report(store, 1)
    view = store.view("ns/job")
    assert view is not None
    assert report(store, 2, at=1) is False
    assert store.settle("ns/job", view.version) is False  # the pass must come back by a timer
    newer = store.view("ns/job")
    assert newer is not None and store.settle("ns/job", newer.version) is True


def test_the_time_of_a_change_is_now_minus_its_age_and_never_goes_back() -> None:
    store = ProgressStore()
    report(store, 5, at=100, age=40)
    view = store.view("ns/job")
    assert view is not None and view.ranks[0].changed_at == T0 + timedelta(seconds=60)
    report(store, 5, at=101, age=50)  # a late report of the same record
    view = store.view("ns/job")
    assert view is not None and view.ranks[0].changed_at == T0 + timedelta(seconds=60)
    report(store, 5, at=102, age=-5e9)  # nonsense ages are clamped: a negative one is "just now"
    view = store.view("ns/job")
    assert view is not None and view.ranks[0].changed_at == T0 + timedelta(seconds=102)
    report(store, 6, at=103, age=1e30)  # a year at most, and never before the change already known
    view = store.view("ns/job")
    assert view is not None and view.ranks[0].changed_at == T0 + timedelta(seconds=102)


def test_a_heartbeat_is_kept_as_the_last_report_received_but_the_change_keeps_its_time() -> None:
    store = ProgressStore()
    report(store, 5, at=100, age=40)
    assert report(store, 5, at=133, age=73) is False  # unchanged: no pass for a heartbeat
    view = store.view("ns/job")
    assert view is not None
    assert (view.ranks[0].changed_at, view.ranks[0].received_at) == (
        T0 + timedelta(seconds=60),
        T0 + timedelta(seconds=133),
    )


def test_a_pass_awaiting_a_report_is_enqueued_by_the_next_one_even_unchanged() -> None:
    """A stall due but unconfirmed, or reporting lost: the next heartbeat is what decides."""
    store = ProgressStore()
    report(store, 5)
    view = store.view("ns/job")
    assert view is not None and store.settle("ns/job", view.version, awaiting=True) is True
    assert report(store, 5, at=30, age=30) is True  # a heartbeat: the job needs its pass
    assert report(store, 5, at=60, age=60) is False  # unsettled: the pass to come reads it
    view = store.view("ns/job")
    assert view is not None and store.settle("ns/job", view.version) is True
    assert report(store, 5, at=90, age=90) is False  # no longer awaited: a heartbeat is no pass


def test_awaiting_any_report_a_heartbeat_during_the_pass_leaves_the_job_unsettled() -> None:
    store = ProgressStore()
    report(store, 5)
    view = store.view("ns/job")
    assert view is not None
    report(store, 5, at=30, age=30)  # a heartbeat the pass did not see
    assert store.settle("ns/job", view.version) is True  # nothing changed: settled
    report(store, 5, at=60, age=60)
    assert store.settle("ns/job", view.version, awaiting=True) is False  # it must come back


def test_a_new_attempt_or_job_replaces_the_reports() -> None:
    store = ProgressStore()
    report(store, 500, rank=1)
    report(store, 10, attempt="worker-uid-2", at=5)
    view = store.view("ns/job")
    assert view is not None and view.attempt == "worker-uid-2" and set(view.ranks) == {0}
    report(store, 7, job_uid="job-uid-2", attempt="w3", at=6)
    view = store.view("ns/job")
    assert view is not None and view.job_uid == "job-uid-2"
    store.forget("ns/job")
    assert store.view("ns/job") is None and len(store) == 0


def test_progress_of_the_lead_rank_with_eta_at_the_recent_rate() -> None:
    store = ProgressStore()
    report(store, 100, at=0)
    report(store, 200, at=10.5)
    report(store, 900, rank=1, at=11)  # a higher rank: not the lead
    view = store.view("ns/job")
    assert view is not None
    progress = progress_of(view)
    assert progress is not None
    assert (progress.step, progress.percent, progress.summary, progress.rank) == (200, 20, "20%", 0)
    assert progress.update_time == T0 + timedelta(seconds=10)  # whole seconds, as the API stores
    # 100 steps in 10.5 s: 800 more take 84 s after step 200 (at 10.5 s)
    assert progress.eta == T0 + timedelta(seconds=94)


# -- identity ------------------------------------------------------------------------------

POD_UID = "authentication.kubernetes.io/pod-uid"
POD_EXTRA = {
    "authentication.kubernetes.io/pod-name": ["job-a-0"],
    "authentication.kubernetes.io/pod-uid": ["pod-uid"],
}


def review(**changes: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "authenticated": True,
        "audiences": [AUDIENCE],
        "user": {"username": "system:serviceaccount:ns:default", "extra": POD_EXTRA},
    }
    status.update(changes)
    return status


def test_a_pod_bound_token_names_the_pod() -> None:
    assert identity_of(review()) == PodIdentity("ns", "job-a-0", "pod-uid")


@pytest.mark.parametrize(
    ("status", "code"),
    [
        ({"authenticated": False, "error": "invalid bearer token"}, 401),
        (review(audiences=["https://kubernetes.default.svc"]), 401),  # a token for another audience
        (review(audiences=None), 401),
        (review(user={"username": "alice", "extra": POD_EXTRA}), 403),  # not a service account
        (review(user={"username": "system:serviceaccount:ns:default"}), 403),  # not bound to a pod
        (
            review(
                user={"username": "system:serviceaccount:ns:default", "extra": {**POD_EXTRA, POD_UID: []}}
            ),
            403,
        ),
    ],
)
def test_a_review_that_does_not_name_a_pod_is_refused(status: dict[str, Any], code: int) -> None:
    refused = identity_of(status)
    assert isinstance(refused, Refusal) and refused.status == code


IDENTITY = PodIdentity("ns", "job-a-0", "pod-uid")


def obj(name: str, uid: str, owner: dict[str, Any] | None = None, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid, "annotations": annotations}
    if owner is not None:
        meta["ownerReferences"] = [{**owner, "controller": True}]
    return {"metadata": meta}


JOB_REF = {"apiVersion": "batch/v1", "kind": "Job", "name": "job-a", "uid": "worker-uid"}
TJ_REF = {"apiVersion": "torchrun.ai/v1alpha1", "kind": "TorchrunJob", "name": "job-a", "uid": "tj-uid"}
POD = obj("job-a-0", "pod-uid", JOB_REF, **{"batch.kubernetes.io/job-completion-index": "1"})
WORKER = obj("job-a", "worker-uid", TJ_REF)
TJ = obj("job-a", "tj-uid")


def verdict(
    pod: dict[str, Any] | None, worker: dict[str, Any] | None, tj: dict[str, Any] | None, claimed: str
) -> Reporter | Refusal:
    """`prove` over caches that hold these objects under any name."""
    return prove(
        IDENTITY,
        claimed,
        pods=lambda _ns, _n: pod,
        worker_jobs=lambda _ns, _n: worker,
        jobs=lambda _ns, _n: tj,
    )


def test_the_owner_chain_proves_the_job() -> None:
    reporter = verdict(POD, WORKER, TJ, "job-a")
    assert isinstance(reporter, Reporter)
    assert (reporter.key, reporter.job_uid, reporter.attempt, reporter.rank) == (
        "ns/job-a",
        "tj-uid",
        "worker-uid",
        1,
    )


@pytest.mark.parametrize(
    ("pod", "worker", "tj", "claimed", "says"),
    [
        (POD, WORKER, TJ, "job-b", "belongs to TorchrunJob job-a, not job-b"),  # a pod of A for B
        (None, WORKER, TJ, "job-a", "not a worker pod"),
        (obj("job-a-0", "other-uid", JOB_REF), WORKER, TJ, "job-a", "not a worker pod"),  # replaced pod
        (obj("job-a-0", "pod-uid"), WORKER, TJ, "job-a", "not controlled by a worker Job"),  # a user's pod
        (
            obj("job-a-0", "pod-uid", TJ_REF),
            WORKER,
            TJ,
            "job-a",
            "not controlled by a worker Job",
        ),  # sync pod
        (POD, None, TJ, "job-a", "not a worker Job"),
        (POD, obj("job-a", "other"), TJ, "job-a", "not a worker Job"),
        (POD, obj("job-a", "worker-uid"), TJ, "job-a", "not controlled by a TorchrunJob"),
        (POD, obj("job-a", "worker-uid", {**TJ_REF, "kind": "Other"}), TJ, "job-a", "not controlled by"),
        (POD, WORKER, None, "job-a", "gone or was replaced"),
        (POD, WORKER, obj("job-a", "new-uid"), "job-a", "gone or was replaced"),
        (obj("job-a-0", "pod-uid", JOB_REF), WORKER, TJ, "job-a", "no completion index"),
    ],
)
def test_a_broken_owner_chain_is_refused(
    pod: dict[str, Any] | None,
    worker: dict[str, Any] | None,
    tj: dict[str, Any] | None,
    claimed: str,
    says: str,
) -> None:
    refused = verdict(pod, worker, tj, claimed)
    assert isinstance(refused, Refusal) and refused.status == 403 and says in refused.message


def worker_pod(index: str, hostname: str | None) -> dict[str, Any]:
    pod = obj("job-a-x", "pod-uid", JOB_REF, **{"batch.kubernetes.io/job-completion-index": index})
    return {**pod, "spec": {"hostname": hostname}} if hostname else pod


SIZED = {**WORKER, "spec": {"completions": 4}}


@pytest.mark.parametrize(
    ("pod", "worker", "says"),
    [
        (worker_pod("3", "job-a-1"), SIZED, "not its hostname's (job-a-1)"),  # an edited annotation
        (worker_pod("4", "job-a-4"), SIZED, "rank 4 is outside the job's 4 nodes"),
        (worker_pod("4095", None), SIZED, "rank 4095 is outside the job's 4 nodes"),
        (worker_pod("-1", None), SIZED, "rank -1 is outside"),
        (worker_pod("5000", None), WORKER, "outside the job's 1024 nodes"),  # no completions: MAX_NODES
    ],
)
def test_a_rank_the_pod_made_up_is_refused(pod: dict[str, Any], worker: dict[str, Any], says: str) -> None:
    """The rank comes from the pod's immutable hostname, agrees with its annotation, and is one of
    the job's: a pod cannot make the controller keep reports for thousands of ranks."""
    refused = verdict(pod, worker, TJ, "job-a")
    assert isinstance(refused, Refusal) and refused.status == 403 and says in refused.message
    accepted = verdict(worker_pod("3", "job-a-3"), SIZED, TJ, "job-a")
    assert isinstance(accepted, Reporter) and accepted.rank == 3
