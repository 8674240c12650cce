"""Which pods the leader takes its label off (controller/leaderelection/podlabel.py): only the
other replicas of the very same Deployment, each proven by UID through its controller
ReplicaSet; a label, a name or a lookalike owner proves nothing."""

from __future__ import annotations

from typing import Any

from controller.api.labels import LEADER_LABEL
from controller.leaderelection.podlabel import has_label, owning_deployment, replicas_to_unlabel


def ref(kind: str, name: str, uid: str, *, controller: bool = True, api: str = "apps/v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": controller}


def replicaset(name: str, uid: str, *owners: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ctl", "uid": uid, "ownerReferences": list(owners)}}


def pod(name: str, *owners: dict[str, Any], leader: bool = True) -> dict[str, Any]:
    labels = {LEADER_LABEL: "true"} if leader else {}
    meta = {"name": name, "namespace": "ctl", "uid": f"uid-{name}", "labels": labels}
    return {"metadata": {**meta, "ownerReferences": list(owners)}}


DEPLOY = ref("Deployment", "torchrun-controller", "deploy-1")
RS = {
    "rs-new": replicaset("rs-new", "rs-new-uid", DEPLOY),
    "rs-old": replicaset("rs-old", "rs-old-uid", DEPLOY),  # the previous rollout's: still ours
    "rs-other": replicaset("rs-other", "rs-other-uid", ref("Deployment", "torchrun-controller", "deploy-2")),
    "rs-free": replicaset("rs-free", "rs-free-uid"),  # controlled by nothing
    "rs-weak": replicaset("rs-weak", "rs-weak-uid", {**DEPLOY, "controller": False}),
}
ME = pod("me", ref("ReplicaSet", "rs-new", "rs-new-uid"))


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_the_other_replicas_of_the_same_deployment_lose_the_label() -> None:
    sibling = pod("sibling", ref("ReplicaSet", "rs-new", "rs-new-uid"))
    older = pod("older", ref("ReplicaSet", "rs-old", "rs-old-uid"))
    assert names(replicas_to_unlabel(ME, [ME, sibling, older], RS)) == ["sibling", "older"]


def test_a_label_alone_proves_nothing() -> None:
    lookalikes = [
        pod("bare"),  # the label and nothing else
        pod("user-rs", ref("ReplicaSet", "rs-free", "rs-free-uid")),  # a ReplicaSet nobody controls
        pod("other-deploy", ref("ReplicaSet", "rs-other", "rs-other-uid")),  # same name, other UID
        pod("stale-uid", ref("ReplicaSet", "rs-new", "not-rs-new")),  # names our RS, wrong UID
        pod("unknown-rs", ref("ReplicaSet", "rs-gone", "rs-gone-uid")),  # RS not found
        pod("not-controller", ref("ReplicaSet", "rs-new", "rs-new-uid", controller=False)),
        pod("weak-chain", ref("ReplicaSet", "rs-weak", "rs-weak-uid")),  # RS not controlled by us
        pod("wrong-group", ref("ReplicaSet", "rs-new", "rs-new-uid", api="extensions.example/v1")),
        pod("job-pod", ref("Job", "rs-new", "rs-new-uid", api="batch/v1")),
    ]
    assert replicas_to_unlabel(ME, [ME, *lookalikes], RS) == []


def test_a_leader_that_is_no_deployments_replica_touches_no_one_else() -> None:
    loner = pod("loner")  # e.g. run as a bare pod: nothing else is provably ours
    sibling = pod("sibling", ref("ReplicaSet", "rs-new", "rs-new-uid"))
    assert replicas_to_unlabel(loner, [loner, sibling], RS) == []


def test_the_leader_never_unlabels_itself() -> None:
    assert replicas_to_unlabel(ME, [ME], RS) == []


def test_the_deployment_is_found_through_the_replicaset_by_uid() -> None:
    assert owning_deployment(ME, RS) == "deploy-1"
    assert owning_deployment(pod("x", ref("ReplicaSet", "rs-other", "rs-other-uid")), RS) == "deploy-2"
    assert owning_deployment(pod("y", ref("ReplicaSet", "rs-new", "wrong")), RS) is None
    assert has_label(ME) and not has_label(pod("z", leader=False))
