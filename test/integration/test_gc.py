"""The garbage collector on the real control plane: it deletes only what it can prove is ours.

kube-controller-manager runs Kubernetes' own garbage collector and pod GC, which would collect
the same orphans and race ours; these tests stop it for their duration so that every deletion
observed is ours, and start it again afterwards.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import audit
import pytest
import yaml
from jobs import make_job
from testbed import REPO, Cluster, wait_until

from controller.cmd.main import App
from controller.meta import Resource
from controller.rest.resources import PODS, PVCS, SERVICES

LABEL = "torchrun-job-name"


@pytest.fixture
def no_kube_gc(cluster: Cluster) -> Iterator[None]:
    cluster.stop("kube-controller-manager")
    try:
        yield
    finally:
        cluster.start("kube-controller-manager")


def controller_ref(kind: str, name: str, uid: str) -> dict[str, Any]:
    api_version = "torchrun.ai/v1alpha1" if kind == "TorchrunJob" else "batch/v1"
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


def meta(name: str, owner: dict[str, Any] | None = None, **labels: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "labels": {LABEL: "x", **labels}}
    if owner is not None:
        out["ownerReferences"] = [owner]
    return out


def service(name: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(name, owner),
        "spec": {"clusterIP": "None", "ports": [{"port": 29400}]},
    }


def pvc(name: str, owner: dict[str, Any] | None = None, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(name, owner, **labels),
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def pod(
    name: str, owner: dict[str, Any] | None = None, node: str | None = None, **labels: str
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(name, owner, **labels),
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def uid_of(cluster: Cluster, ns: str, kind: str, name: str) -> str:
    return str(cluster.get(kind, name, "-n", ns)["metadata"]["uid"])


def gone_or_deleting(cluster: Cluster, ns: str, kind: str, name: str) -> bool:
    proc = cluster.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    return proc.returncode != 0 or '"deletionTimestamp"' in proc.stdout


def untouched(cluster: Cluster, ns: str, kind: str, name: str) -> bool:
    proc = cluster.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    return proc.returncode == 0 and '"deletionTimestamp"' not in proc.stdout


def deletions(app: App, resource: str) -> float:
    return app.metrics.gc_deletions.labels(resource)._value.get()


def test_a_labelled_user_object_survives_and_a_real_orphan_is_collected(
    cluster: Cluster, namespace: str, no_kube_gc: None, start_controller: Callable[..., App]
) -> None:
    # TorchrunJob x, first incarnation: its queue does not exist, so the controller makes nothing
    make_job(cluster, namespace, "no-such-queue", name="x")
    old = controller_ref("TorchrunJob", "x", uid_of(cluster, namespace, "torchrunjob", "x"))
    cluster.apply([service("x", old), pvc("x-workspace", old)], namespace)
    cluster.apply(pvc("x-checkpoints", old, **{"torchrun.ai/persist": "true"}), namespace)
    # the user's own objects, reusing our unprefixed label key — one naming a job that never was
    ghost = {LABEL: "ghost"}
    cluster.apply(
        [
            pod("mine", **ghost),
            pvc("mine-data", **ghost),
            service("theirs", controller_ref("Job", "cron", "c-1")),
        ],
        namespace,
    )
    # delete x (no cascade: Kubernetes' GC is stopped) and submit it again under the same name
    cluster.kubectl("delete", "torchrunjob", "x", "-n", namespace)
    make_job(cluster, namespace, "no-such-queue", name="x")
    new = controller_ref("TorchrunJob", "x", uid_of(cluster, namespace, "torchrunjob", "x"))
    assert new["uid"] != old["uid"]
    cluster.apply(pvc("x-current", new), namespace)

    app = start_controller()  # --gc-interval 1
    wait_until(
        lambda: gone_or_deleting(cluster, namespace, "service", "x"), 30, message="orphan Service collected"
    )
    wait_until(
        lambda: gone_or_deleting(cluster, namespace, "pvc", "x-workspace"), 30, message="orphan PVC collected"
    )
    # several more passes: the background thread runs every second, and three passes run here
    time.sleep(3)
    for _ in range(3):
        assert app.gc.collect() == 0
    for kind, name in [
        ("pod", "mine"),
        ("pvc", "mine-data"),
        ("service", "theirs"),
        ("pvc", "x-checkpoints"),  # persisted: never ours to delete
        ("pvc", "x-current"),  # its TorchrunJob exists
    ]:
        assert untouched(cluster, namespace, kind, name), f"{kind} {name} was touched"
    assert (deletions(app, "services"), deletions(app, "persistentvolumeclaims"), deletions(app, "pods")) == (
        1,
        1,
        0,
    )


def node(name: str, *, taint: bool = False) -> dict[str, Any]:
    """A Node no kubelet (and no kwok) manages: it stays exactly as written here."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}}
    if taint:
        body["spec"]["taints"] = [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]
    return body


def set_ready(cluster: Cluster, name: str, ready: str) -> None:
    """Ready (or not) since 2020, as written through the status subresource."""
    cond = {"type": "Ready", "status": ready, "lastTransitionTime": "2020-01-01T00:00:00Z", "reason": "Test"}
    patch = json.dumps({"status": {"conditions": [cond]}})
    cluster.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", patch)


def test_stuck_pods_are_forced_only_off_lost_nodes_and_counted_once(
    cluster: Cluster, namespace: str, no_kube_gc: None, start_controller: Callable[..., App]
) -> None:
    suffix = namespace[-8:]
    nodes = {
        "healthy": f"gc-healthy-{suffix}",
        "notready": f"gc-notready-{suffix}",
        "oos": f"gc-oos-{suffix}",
        "gone": f"gc-gone-{suffix}",  # never created
    }
    cluster.apply([node(nodes["healthy"]), node(nodes["notready"]), node(nodes["oos"], taint=True)])
    set_ready(cluster, nodes["healthy"], "True")
    set_ready(cluster, nodes["notready"], "False")
    try:
        make_job(cluster, namespace, "no-such-queue", name="x")
        tj = controller_ref("TorchrunJob", "x", uid_of(cluster, namespace, "torchrunjob", "x"))
        worker = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta("x", tj),
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
                },
            },
        }
        cluster.apply(worker, namespace)
        job_ref = controller_ref("Job", "x", uid_of(cluster, namespace, "job", "x"))
        held = pod("held", job_ref, nodes["gone"])
        pods = {
            "on-healthy": pod("on-healthy", job_ref, nodes["healthy"]),
            "on-notready": pod("on-notready", job_ref, nodes["notready"]),
            "on-oos": pod("on-oos", job_ref, nodes["oos"]),
            "on-gone": pod("on-gone", job_ref, nodes["gone"]),
            "held": {**held, "metadata": {**held["metadata"], "finalizers": ["example.com/hold"]}},
            "users": pod("users", None, nodes["gone"]),  # our label, not ours
        }
        cluster.apply(list(pods.values()), namespace)
        for name in pods:
            cluster.kubectl("delete", "pod", name, "-n", namespace, "--wait=false", "--grace-period=1")
        app = start_controller()
        wait_until(lambda: len(app.gc.owned[PODS].list()) >= len(pods), 30, message="pods cached")
        overdue = time.time() + 3600  # as if every deletion were an hour overdue
        forced = sum(app.gc.collect(now=overdue) for _ in range(3))
        assert forced == 3
        remaining = {p["metadata"]["name"] for p in cluster.get("pods", "-n", namespace)["items"]}
        assert remaining == {"on-healthy", "held", "users"}, remaining
        assert deletions(app, "pods") == 3  # once per pod, not once per pass
    finally:
        cluster.kubectl(
            "patch",
            "pod",
            "held",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
            check=False,
        )
        for name in ("on-healthy", "users", "held"):
            cluster.kubectl(
                "delete", "pod", name, "-n", namespace, "--force", "--grace-period=0", check=False
            )
        cluster.kubectl(
            "delete", "node", *[n for k, n in nodes.items() if k != "gone"], "--ignore-not-found", check=False
        )


# -- one crafted owner reference ---------------------------------------------------------------------

# what any user may write into an object of theirs that carries our label: the first climbs to
# another namespace's Secret, the second is the name from the report (issue 30, item 5)
TO_KUBE_SYSTEM = "../../../../../../api/v1/namespaces/kube-system/secrets/x"
FROM_THE_REPORT = "../../../api/v1/namespaces/kube-system/secrets/x"
# the deployed controller's identity (config/rbac): the one user whose reads the test bed's audit
# log records (hack/controlplane.sh)
NAMESPACE, SERVICE_ACCOUNT = "torchrun-system", "torchrun-controller"
USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"


@pytest.fixture
def audited_controller_identity(cluster: Cluster, crds: Path, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig of the deployed controller's ServiceAccount (`USER`) with its shipped RBAC.
    Removed afterwards, the namespace waited out (test_config.py installs it again). Needs
    kube-controller-manager: request it before `no_kube_gc`."""
    assert cluster.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0, (
        f"{NAMESPACE} exists before the test: it would delete someone else's"
    )
    cluster.kubectl("create", "namespace", NAMESPACE)
    rbac = str(REPO / "config" / "rbac")
    try:
        cluster.kubectl("apply", "-k", rbac)
        token = cluster.kubectl("create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=1h").stdout
        config = yaml.safe_load(cluster.kubeconfig.read_text())  # the admin's, credentials swapped
        for user in config["users"]:
            user["user"] = {"token": token.strip()}
        path = tmp_path / "controller.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        yield path
    finally:
        cluster.kubectl("delete", "-k", rbac, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s", check=False)


def sent_since(cluster: Cluster, since: datetime) -> list[audit.Event]:
    """Every request `USER` sent since `since`, as the audit log recorded it."""
    return [
        e for e in audit.events(cluster, USER) if e["user"]["username"] == USER and audit.received(e) >= since
    ]


def stray_requests(sent: list[audit.Event], namespace: str) -> list[str]:
    """The requests of `sent` not on the path of the object or collection their audit record
    names, or reaching outside `namespace` and the cluster-scoped resources: method and URI of
    each. A create's record names the object it makes (not on its URI): only its namespace is
    checked. Without a record of an object only discovery (`/api`, `/apis`,
    `/apis/<group>[/<version>]`) and the service-account issuer's keys may be read."""
    strays = []
    for event in sent:
        uri, ref = event["requestURI"], audit.ref(event)
        path = uri.split("?", 1)[0]
        if not ref:
            discovery = path.split("/")[1:2] in (["api"], ["apis"]) and len(path.split("/")) <= 4
            ok = discovery or path == "/openid/v1/jwks"
        elif ref.get("namespace", "") not in ("", namespace):
            ok = False
        elif event["verb"] == "create":
            ok = True
        else:
            named = Resource(ref.get("apiGroup", ""), ref["apiVersion"], ref["resource"], "")
            ok = path == named.path(ref.get("namespace"), ref.get("name"), ref.get("subresource"))
        if not ok:
            strays.append(f"{event['verb']} {uri}")
    return strays


def errors(app: App, resource: str) -> float:
    return float(app.metrics.gc_errors.labels(resource)._value.get())


def test_a_poisoned_owner_reference_neither_stops_collection_nor_steers_a_request(
    cluster: Cluster,
    namespace: str,
    audited_controller_identity: Path,
    no_kube_gc: None,
    start_controller: Callable[..., App],
) -> None:
    make_job(cluster, namespace, "no-such-queue", name="x")
    old = controller_ref("TorchrunJob", "x", uid_of(cluster, namespace, "torchrunjob", "x"))
    cluster.apply([service("x", old), pvc("x-workspace", old)], namespace)
    cluster.kubectl("delete", "torchrunjob", "x", "-n", namespace)  # its Service and PVC: orphans
    # listed before the orphans of their kind (a cache lists by name), on every kind we collect
    poison = {TO_KUBE_SYSTEM: "p-1", FROM_THE_REPORT: "p-2", "x?watch=true": "p-3"}
    refs = [controller_ref("TorchrunJob", name, uid) for name, uid in poison.items()]
    poisoned = {
        ("service", "a-poisoned"): service("a-poisoned", refs[0]),
        ("pvc", "a-poisoned"): pvc("a-poisoned", refs[1]),
        ("pod", "a-poisoned"): pod("a-poisoned", refs[2]),
    }
    cluster.apply(list(poisoned.values()), namespace)

    since = datetime.now(timezone.utc)
    app = start_controller("--kubeconfig", str(audited_controller_identity))  # --gc-interval 1
    orphans = [("service", "x"), ("pvc", "x-workspace")]
    try:  # the verdict comes below, with the requests sent: both say what went wrong
        wait_until(lambda: all(gone_or_deleting(cluster, namespace, *o) for o in orphans), 30, 0.2)
        collected = True
    except AssertionError:
        collected = False
    passes = []
    for _ in range(3):  # as the background thread runs them, every second
        try:
            passes.append(str(app.gc.collect()))
        except Exception as exc:  # the pass stopped: say where
            passes.append(repr(exc)[:300])
    audit.flush(cluster, namespace)
    sent = sent_since(cluster, since)
    assert (stray_requests(sent, namespace), collected, passes) == ([], True, ["0", "0", "0"])
    # the log saw this controller's reads: the GC's GET that found TorchrunJob x gone
    ref = ("get", "torchrunjobs", "x")
    owner_reads = [
        e for e in sent if (e["verb"], audit.ref(e).get("resource"), audit.ref(e).get("name")) == ref
    ]
    assert owner_reads, "the audit log shows none of this controller's reads"
    for kind, name in poisoned:
        assert untouched(cluster, namespace, kind, name), f"{kind} {name} was touched"
    assert (deletions(app, "services"), deletions(app, "persistentvolumeclaims")) == (1, 1)
    # passed over by rule, before any request: not an error
    assert [errors(app, r.plural) for r in (SERVICES, PODS, PVCS)] == [0, 0, 0]
