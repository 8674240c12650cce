"""The leader's pod label on the real control plane (controller/leaderelection/podlabel.py): the
shipped progress Service routes to the leading replica alone; a new leader takes the label off a
hung ex-leader; nothing the controller cannot prove its own replica is touched.

The test bed runs no Deployment or ReplicaSet controller, so the test makes the ownership chain
itself (Deployment ← ReplicaSet ← pods, by UID): what the controller checks is exactly that chain.
kwok runs the pods (Ready, with an address), kube-controller-manager's EndpointSlice controller
turns the shipped Service's selector into endpoints.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import yaml
from jobs import controller_command
from testbed import Cluster, wait_until

from controller.api.labels import LEADER_LABEL
from controller.leaderelection.podlabel import LeaderPodLabel
from controller.rest import RESTClient

REPO = Path(__file__).resolve().parents[2]
APP_LABELS = {"app.kubernetes.io/name": "torchrun-controller", "app.kubernetes.io/component": "controller"}


def progress_service() -> dict[str, Any]:
    """The shipped progress Service (config/manager/service.yaml), as it is."""
    docs = yaml.safe_load_all((REPO / "config/manager/service.yaml").read_text())
    (svc,) = [d for d in docs if d and d["metadata"]["name"] == "torchrun-controller-progress"]
    svc["metadata"].pop("namespace")
    return dict(svc)


def owner(kind: str, obj: dict[str, Any], api: str = "apps/v1") -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": api, "kind": kind, "name": meta["name"], "uid": meta["uid"], "controller": True}


def deployment(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 0,  # nothing runs it here: the test makes the ReplicaSet and pods
                "selector": {"matchLabels": {"deploy": name}},
                "template": {
                    "metadata": {"labels": {"deploy": name}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        },
        ns,
    )
    return cluster.get("deployment", name, "-n", ns)


def replicaset(cluster: Cluster, ns: str, name: str, deploy: dict[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deploy is not None:
        meta["ownerReferences"] = [owner("Deployment", deploy)]
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": meta,
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"rs": name}},
                "template": {
                    "metadata": {"labels": {"rs": name}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        },
        ns,
    )
    return cluster.get("replicaset", name, "-n", ns)


def pod(
    cluster: Cluster, ns: str, name: str, rs: dict[str, Any] | None, labels: dict[str, str]
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if rs is not None:
        meta["ownerReferences"] = [owner("ReplicaSet", rs)]
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "containers": [
                    {"name": "manager", "image": "x", "ports": [{"name": "progress", "containerPort": 9443}]}
                ]
            },
        },
        ns,
    )
    return cluster.get("pod", name, "-n", ns)


def labelled(cluster: Cluster, ns: str) -> set[str]:
    pods = cluster.get("pods", "-n", ns, "-l", f"{LEADER_LABEL}=true")
    return {p["metadata"]["name"] for p in pods["items"]}


def endpoints(cluster: Cluster, ns: str) -> set[str]:
    """The pods the progress Service routes to, as the EndpointSlice controller sees them."""
    slices = cluster.get(
        "endpointslices", "-n", ns, "-l", "kubernetes.io/service-name=torchrun-controller-progress"
    )
    return {
        e["targetRef"]["name"]
        for s in slices["items"]
        for e in s.get("endpoints") or ()
        if e.get("targetRef")
    }


def set_label(cluster: Cluster, ns: str, name: str) -> None:
    cluster.kubectl("label", "pod", name, "-n", ns, f"{LEADER_LABEL}=true", "--overwrite")


def test_the_leader_labels_itself_and_unlabels_only_its_own_replicas(
    cluster: Cluster, namespace: str, rest: RESTClient
) -> None:
    ns = namespace
    ours = deployment(cluster, ns, "torchrun-controller")
    theirs = deployment(cluster, ns, "lookalike")  # a user's, with the same pod labels
    rs_new = replicaset(cluster, ns, "ctl-new", ours)
    rs_old = replicaset(cluster, ns, "ctl-old", ours)  # a previous rollout's: still ours
    rs_theirs = replicaset(cluster, ns, "lookalike-rs", theirs)
    rs_free = replicaset(cluster, ns, "free-rs", None)  # controlled by nobody
    leader = {**APP_LABELS, LEADER_LABEL: "true"}
    pod(cluster, ns, "me", rs_new, APP_LABELS)
    pod(cluster, ns, "sibling", rs_new, leader)  # the hung ex-leader, still labelled
    pod(cluster, ns, "older", rs_old, leader)
    # carry the label and no proof: a user's pods; they have the label only, so they are not
    # the Service's endpoints either way and the endpoints below show the replicas alone
    pod(cluster, ns, "bare", None, {LEADER_LABEL: "true"})
    pod(cluster, ns, "impostor", rs_theirs, {LEADER_LABEL: "true"})
    pod(cluster, ns, "freeloader", rs_free, {LEADER_LABEL: "true"})
    cluster.apply(progress_service(), ns)
    wait_until(lambda: endpoints(cluster, ns) == {"sibling", "older"}, 60, message="the ex-leaders routed to")

    label = LeaderPodLabel(rest, ns, "me")
    assert sorted(label.claim()) == ["older", "sibling"]
    assert labelled(cluster, ns) == {"me", "bare", "impostor", "freeloader"}
    wait_until(
        lambda: endpoints(cluster, ns) == {"me"}, 60, message="the Service to route to the leader alone"
    )
    assert label.claim() == []  # nothing left to do: a second pass writes nothing

    # a replica relabelled behind the leader's back (a hung ex-leader waking) loses it again
    set_label(cluster, ns, "sibling")
    assert label.claim() == ["sibling"]

    # the leader drops its own label when it stops leading: no endpoint until the next leader
    label.drop()
    assert labelled(cluster, ns) == {"bare", "impostor", "freeloader"}
    wait_until(lambda: endpoints(cluster, ns) == set(), 60, message="no endpoint once the leader let go")


def test_a_pod_replaced_under_the_same_name_is_not_unlabelled_by_a_stale_uid(
    cluster: Cluster, namespace: str, rest: RESTClient
) -> None:
    ns = namespace
    ours = deployment(cluster, ns, "torchrun-controller")
    rs = replicaset(cluster, ns, "ctl", ours)
    stale_uid = pod(cluster, ns, "sibling", rs, {LEADER_LABEL: "true"})["metadata"]["uid"]
    cluster.kubectl("delete", "pod", "sibling", "-n", ns, "--grace-period=0", "--force", "--wait=true")
    pod(cluster, ns, "sibling", None, {LEADER_LABEL: "true"})  # someone else's pod, same name
    label = LeaderPodLabel(rest, ns, "me")
    assert label._unlabel("sibling", stale_uid, fenced=True, timeout=10) is False
    assert labelled(cluster, ns) == {"sibling"}


@contextmanager
def replica(cluster: Cluster, ns: str, identity: str, logs: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A `torchrun-controller` with leader election, as the Deployment runs it: POD_NAME and
    POD_NAMESPACE from the downward API name its pod."""
    cmd = controller_command(
        cluster,
        ns,
        "--leader-elect",
        "--leader-elect-namespace",
        ns,
        "--leader-elect-identity",
        identity,
        "--leader-elect-lease-duration",
        "4",
        "--leader-elect-renew-deadline",
        "3",
        "--leader-elect-retry-period",
        "0.5",
        "--log-format",
        "console",
    )
    env = {**cluster.env(), "POD_NAME": f"ctl-{identity}", "POD_NAMESPACE": ns}
    with (logs / f"{identity}.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()


def test_a_new_leader_takes_the_label_from_a_hung_one_which_never_gets_it_back(
    cluster: Cluster, crds: Path, namespace: str, tmp_path: Path
) -> None:
    """Two controller processes, each the replica of one pod of the same Deployment: the leader's
    pod alone is routed to; frozen (SIGSTOP) past its lease, the other takes over and the label
    with it; woken, the old leader exits and its pod stays unlabelled; SIGTERM on the new leader
    releases the Lease and takes its label off."""
    ns = namespace
    rs = replicaset(cluster, ns, "ctl", deployment(cluster, ns, "torchrun-controller"))
    for name in ("ctl-alpha", "ctl-beta"):
        pod(cluster, ns, name, rs, APP_LABELS)
    cluster.apply(progress_service(), ns)

    def logs(identity: str) -> str:
        return (tmp_path / f"{identity}.log").read_text()[-3000:]

    with ExitStack() as stack:
        alpha = stack.enter_context(replica(cluster, ns, "alpha", tmp_path))
        wait_until(
            lambda: labelled(cluster, ns) == {"ctl-alpha"}, 60, message=f"alpha labelled:\n{logs('alpha')}"
        )
        beta = stack.enter_context(replica(cluster, ns, "beta", tmp_path))
        wait_until(lambda: "caches synced" in logs("beta"), 60, message="the standby's caches")
        wait_until(lambda: endpoints(cluster, ns) == {"ctl-alpha"}, 60, message="the leader alone routed to")
        assert labelled(cluster, ns) == {"ctl-alpha"}  # the standby labels nothing

        alpha.send_signal(signal.SIGSTOP)  # hung, with the label on its pod
        wait_until(
            lambda: labelled(cluster, ns) == {"ctl-beta"},
            60,
            message=f"beta takes the label:\n{logs('beta')}",
        )
        wait_until(
            lambda: endpoints(cluster, ns) == {"ctl-beta"}, 60, message="the new leader alone routed to"
        )

        alpha.send_signal(signal.SIGCONT)
        assert alpha.wait(30) != 0, logs("alpha")
        assert labelled(cluster, ns) == {"ctl-beta"}, logs("alpha")

        beta.send_signal(signal.SIGTERM)
        assert beta.wait(30) == 0, logs("beta")
        assert labelled(cluster, ns) == set(), logs("beta")
