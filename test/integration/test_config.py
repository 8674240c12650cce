"""config/ on the real control plane: installed the way docs/install.md says, accepted by the
kube-apiserver (Pod Security "restricted" included), and its RBAC is exactly what the controller
needs — every need allowed, nothing else granted — proven last by running the controller process
with the Deployment's own flags under the ServiceAccount's token.

Everything created here is removed again (the control plane is shared by the whole session),
the cluster-scoped RBAC, StorageClass and TorchrunQueue included.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import audit
import pytest
import yaml
from testbed import REPO, Cluster, wait_until

CONFIG = REPO / "config"
NAMESPACE = "torchrun-system"
SERVICE_ACCOUNT = "torchrun-controller"
USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]
CRUD = ("get", "list", "watch", "create", "update", "patch", "delete")


class Need(NamedTuple):
    """Verbs on a resource; `namespace` "" means in every namespace (or cluster-scoped)."""

    group: str
    resource: str  # "plural" or "plural/subresource"
    verbs: tuple[str, ...]
    why: str
    namespace: str = ""
    name: str = ""


# What the controller does, from the code. The ClusterRole and the Lease Role grant these and
# nothing more (test_the_roles_grant_nothing_beyond_the_needs).
NEEDS = [
    Need("torchrun.ai", "torchrunjobs", ("get", "list", "watch"), "informer; GC confirms a job is gone"),
    Need("torchrun.ai", "torchrunjobs", ("delete",), "ttlSecondsAfterFinished deletes the job"),
    # status is written with PUT; PATCH on the status subresource is no more power than that
    Need("torchrun.ai", "torchrunjobs/status", ("update", "patch"), "conditions, phase, workers"),
    Need("torchrun.ai", "torchrunjobs/finalizers", ("update",), "blockOwnerDeletion on owned objects"),
    Need("torchrun.ai", "torchrunqueues/finalizers", ("update",), "blockOwnerDeletion on owned KAI Queues"),
    Need("torchrun.ai", "torchrunqueues", ("get", "list", "watch"), "informer"),
    Need("torchrun.ai", "torchrunqueues/status", ("update", "patch"), "Ready, job counts"),
    Need("batch", "jobs", CRUD, "the Indexed worker Job; restarts delete it; GC"),
    Need("", "services", CRUD, "the headless Service; GC"),
    Need("", "persistentvolumeclaims", CRUD, "workspace and checkpoint PVCs; GC"),
    Need("", "pods", CRUD, "the sync pod; GC deletes orphans and force-deletes stuck pods"),
    Need("", "pods/eviction", ("create",), "hot reload restarts the workers without counting a failure"),
    Need("", "nodes", ("get",), "GC: is a stuck pod's node gone, NotReady or out of service"),
    Need("", "nodes", ("list", "watch"), "autoscaler: the cluster's GPU load and free room, from a cache"),
    Need("", "events", ("list",), "ClaimNotBound quotes the PVC's Events"),
    Need("", "events", ("create", "patch"), "EventRecorder creates, then bumps count"),
    Need("events.k8s.io", "events", ("create", "patch"), "the same Events through events.k8s.io/v1"),
    Need("storage.k8s.io", "storageclasses", ("get", "list", "watch"), "a queue's StorageClasses exist"),
    Need("scheduling.run.ai", "queues", CRUD, "KAI Queue per TorchrunQueue"),
    Need("scheduling.run.ai", "podgroups", CRUD, "KAI PodGroup per job"),
    Need("scheduling.x-k8s.io", "podgroups", CRUD, "coscheduling PodGroup per job"),
    Need("scheduling.volcano.sh", "podgroups", CRUD, "Volcano PodGroup per job"),
    Need("kueue.x-k8s.io", "workloads", ("list", "watch", "patch"), "informer; suspend sets spec.active"),
    Need("coordination.k8s.io", "leases", ("create",), "--leader-elect creates the Lease", NAMESPACE),
    Need(
        "coordination.k8s.io",
        "leases",
        ("get", "update"),
        "--leader-elect renews and releases it",
        NAMESPACE,
        "torchrun-controller",
    ),
]

# What it must not be able to do (a token leak must not become a cluster takeover).
DENIED = [
    Need("", "secrets", ("get", "list", "watch"), "credentials"),
    Need("", "configmaps", ("get", "update"), "not used"),
    Need("", "nodes", ("delete", "patch", "update"), "nodes are the cluster's"),
    Need("", "namespaces", ("delete",), "not used"),
    Need("", "pods/exec", ("create",), "no shells in training pods"),
    Need("", "pods/log", ("get",), "not used"),
    Need("", "serviceaccounts/token", ("create",), "no minting tokens"),
    Need("", "pods", ("deletecollection",), "deletes one by one"),
    Need("batch", "jobs", ("deletecollection",), "deletes one by one"),
    Need("apps", "deployments", ("create", "update"), "not used"),
    Need("torchrun.ai", "torchrunjobs", ("create", "update", "patch"), "the users' specs are theirs"),
    Need("torchrun.ai", "torchrunqueues", ("create", "update", "delete"), "platform engineers own queues"),
    Need("apiextensions.k8s.io", "customresourcedefinitions", ("create", "update"), "installed by admins"),
    Need("rbac.authorization.k8s.io", "clusterroles", ("escalate", "bind", "update"), "no escalation"),
    Need("kueue.x-k8s.io", "workloads", ("create", "delete"), "Kueue owns its Workloads"),
    Need("coordination.k8s.io", "leases", ("get", "update"), "others' Leases", NAMESPACE, "kube-scheduler"),
    Need("coordination.k8s.io", "leases", ("create", "update"), "Leases elsewhere", "kube-system"),
]


def review(need: Need, verb: str) -> dict[str, Any]:
    resource, _, subresource = need.resource.partition("/")
    attributes = {"group": need.group, "resource": resource, "subresource": subresource, "verb": verb}
    attributes.update({"namespace": need.namespace, "name": need.name})
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": USER, "groups": GROUPS, "resourceAttributes": attributes},
    }


def allowed(cluster: Cluster, needs: list[Need]) -> dict[tuple[Need, str], bool]:
    """Ask the authorizer about every (need, verb) in one SubjectAccessReview batch (what
    `kubectl auth can-i --as` does, without its discovery lookup, so it also works for
    groups whose CRDs are not installed here: KAI, Volcano, scheduler-plugins)."""
    asks = [(need, verb) for need in needs for verb in need.verbs]
    body = {"apiVersion": "v1", "kind": "List", "items": [review(n, v) for n, v in asks]}
    out = cluster.kubectl("create", "-o", "yaml", "-f", "-", input=json.dumps(body)).stdout
    answers = [bool(r["status"].get("allowed")) for r in yaml.safe_load_all(out) if r]
    assert len(answers) == len(asks)
    return dict(zip(asks, answers, strict=True))


def render(cluster: Cluster, path: Path) -> list[dict[str, Any]]:
    out = cluster.kubectl("kustomize", str(path)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module")
def installed(cluster: Cluster, crds: Path) -> Iterator[subprocess.CompletedProcess[str]]:
    """docs/install.md's steps: the CRDs (the `crds` fixture: `kubectl apply -f crd/`), then
    `kubectl apply -k config/`. Yields that apply's result; deletes it all afterwards."""
    assert cluster.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0, (
        f"{NAMESPACE} exists before the test: it would delete someone else's"
    )
    try:
        yield cluster.kubectl("apply", "-k", str(CONFIG))
    finally:
        cluster.kubectl("delete", "-k", str(CONFIG), "--ignore-not-found", "--timeout=120s", check=False)


def test_kustomize_renders_the_controller_and_its_rbac(cluster: Cluster) -> None:
    objects = {(d["kind"], d["metadata"]["name"]): d for d in render(cluster, CONFIG)}
    expected = {
        ("Namespace", NAMESPACE),
        ("ServiceAccount", SERVICE_ACCOUNT),
        ("ClusterRole", "torchrun-controller"),
        ("ClusterRoleBinding", "torchrun-controller"),
        ("Role", "torchrun-controller-leader-election"),
        ("RoleBinding", "torchrun-controller-leader-election"),
        ("Deployment", "torchrun-controller"),
        ("Service", "torchrun-controller-metrics"),
    }
    assert expected <= set(objects)
    assert {kind for kind, _ in set(objects) - expected} <= {"CustomResourceDefinition"}
    for (kind, name), obj in objects.items():
        if kind not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"):
            assert obj["metadata"]["namespace"] == NAMESPACE, (kind, name)
    for obj in objects.values():
        for subject in obj.get("subjects") or []:
            assert subject == {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    # the optional extras render too (the ServiceMonitor's CRD is not installed here)
    assert [d["kind"] for d in render(cluster, CONFIG / "prometheus")] == ["ServiceMonitor"]
    assert [d["kind"] for d in render(cluster, CONFIG / "grafana")] == ["ConfigMap"]


def test_config_is_accepted_and_meets_pod_security_restricted(
    cluster: Cluster, installed: subprocess.CompletedProcess[str]
) -> None:
    # the namespace enforces and warns "restricted": a Deployment that broke it would warn here
    assert "Warning" not in installed.stderr, installed.stderr
    deploy = cluster.get("deployment", "torchrun-controller", "-n", NAMESPACE)
    assert deploy["spec"]["replicas"] == 2
    # this test bed runs no Deployment controller: create its pod by hand, admission decides
    template = deploy["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "torchrun-controller-admission", **template["metadata"]},
        "spec": template["spec"],
    }
    out = cluster.kubectl("create", "--dry-run=server", "-n", NAMESPACE, "-f", "-", input=json.dumps(pod))
    assert "Warning" not in out.stderr, out.stderr
    # the dashboard ConfigMap (config/grafana) is accepted as well
    out = cluster.kubectl("apply", "--dry-run=server", "-k", str(CONFIG / "grafana"))
    assert "configmap/torchrun-controller-dashboard" in out.stdout


def test_the_service_account_may_do_everything_the_controller_does(
    cluster: Cluster, installed: subprocess.CompletedProcess[str]
) -> None:
    answers = allowed(cluster, NEEDS)
    denied = [
        f"{verb} {need.resource}.{need.group} ({need.why})" for (need, verb), ok in answers.items() if not ok
    ]
    assert not denied, denied


def test_the_service_account_may_do_nothing_dangerous(
    cluster: Cluster, installed: subprocess.CompletedProcess[str]
) -> None:
    answers = allowed(cluster, DENIED)
    granted = [
        f"{verb} {need.resource}.{need.group} in {need.namespace or 'all'}"
        for (need, verb), ok in answers.items()
        if ok
    ]
    assert not granted, granted


def test_kubectl_auth_can_i_answers_as_documented(
    cluster: Cluster, installed: subprocess.CompletedProcess[str]
) -> None:
    def can_i(*args: str) -> bool:
        proc = cluster.kubectl("auth", "can-i", f"--as={USER}", *args, check=False)
        assert proc.stdout.strip() in ("yes", "no"), proc.stderr
        return proc.returncode == 0

    assert can_i("watch", "torchrunjobs.torchrun.ai", "--all-namespaces")
    assert can_i("update", "torchrunqueues.torchrun.ai", "--subresource=status")
    assert can_i("create", "jobs.batch", "-n", "default")
    assert not can_i("get", "secrets", "-n", NAMESPACE)
    assert not can_i("create", "pods", "--subresource=exec", "-n", "default")


def rules(objects: list[dict[str, Any]]) -> set[tuple[str, str, str, str, str]]:
    """(namespace, group, resource, verb, name) granted by the Roles and ClusterRoles."""
    granted = set()
    for obj in objects:
        if obj["kind"] not in ("Role", "ClusterRole"):
            continue
        ns = obj["metadata"].get("namespace", "") if obj["kind"] == "Role" else ""
        for rule in obj["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [""]:
                            granted.add((ns, group, resource, verb, name))
    return granted


def test_the_roles_grant_nothing_beyond_the_needs(cluster: Cluster) -> None:
    granted = rules(render(cluster, CONFIG))
    assert not any("*" in g for g in granted), "no wildcards"
    needed = {(n.namespace, n.group, n.resource, v, n.name) for n in NEEDS for v in n.verbs}
    assert granted - needed == set(), "granted but not needed"
    assert needed - granted == set(), "needed but not granted"


# -- the controller itself, as its ServiceAccount ------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_account_kubeconfig(cluster: Cluster, path: Path) -> Path:
    """A kubeconfig with the ServiceAccount's token, defaulting to its namespace like a pod."""
    token = cluster.kubectl("create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=1h").stdout
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testbed", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token.strip()}}],
        "contexts": [
            {
                "name": SERVICE_ACCOUNT,
                "context": {"cluster": "testbed", "user": SERVICE_ACCOUNT, "namespace": NAMESPACE},
            }
        ],
        "current-context": SERVICE_ACCOUNT,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


class Request(NamedTuple):
    """One kind of request, as the API server's audit log records it."""

    group: str
    resource: str  # "plural" or "plural/subresource"
    verb: str
    namespace: str
    name: str


def requests_by(cluster: Cluster, user: str) -> dict[Request, list[dict[str, Any]]]:
    """Every resource request `user` sent, from the audit log (hack/controlplane.sh records the
    writes of every user and the reads of this ServiceAccount); discovery has no objectRef."""
    out: dict[Request, list[dict[str, Any]]] = {}
    for event in audit.events(cluster, user):
        ref = event.get("objectRef")
        if event["user"]["username"] != user or not ref:
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = Request(
            ref.get("apiGroup", ""), resource, event["verb"], ref.get("namespace", ""), ref.get("name", "")
        )
        out.setdefault(key, []).append(event)
    return out


def decided(event: dict[str, Any]) -> str:
    """The authorizer's decision on the request: "allow" or "forbid"."""
    return str((event.get("annotations") or {}).get("authorization.k8s.io/decision"))


# What the scenario below must exercise at least, so an empty or misread audit log cannot pass.
SURELY_EXERCISED = {
    ("torchrun.ai", "torchrunjobs", "watch"),
    ("torchrun.ai", "torchrunjobs", "delete"),
    ("torchrun.ai", "torchrunjobs/status", "update"),
    ("batch", "jobs", "create"),
    ("", "services", "create"),
    ("coordination.k8s.io", "leases", "update"),
}


def check_rbac_against_the_audit_log(cluster: Cluster, note: Callable[[str, object], None]) -> None:
    """Every request the ServiceAccount really sent (audit log) was allowed when sent and is
    granted by the installed roles now (SubjectAccessReview, with its namespace and name); the
    grants this run never used are reported as a note, not a failure."""
    used = requests_by(cluster, USER)
    kinds = {(r.group, r.resource, r.verb) for r in used}
    missing = SURELY_EXERCISED - kinds
    assert not missing, f"the audit log misses requests this run surely sent: {missing}; has {sorted(kinds)}"
    refused = sorted(
        {(r, decision) for r, events in used.items() for e in events if (decision := decided(e)) != "allow"}
    )
    assert not refused, f"requests the API server did not authorize: {refused}"
    needs = [Need(r.group, r.resource, (r.verb,), "audit log", r.namespace, r.name) for r in used]
    answers = allowed(cluster, needs)
    not_granted = sorted(
        f"{v} {n.resource}.{n.group} in {n.namespace or 'all'} {n.name}"
        for (n, v), ok in answers.items()
        if not ok
    )
    assert not not_granted, f"the controller sent these, the roles do not grant them: {not_granted}"
    unused = sorted(
        {kind(group, resource, verb) for _, group, resource, verb, _ in rules(render(cluster, CONFIG))}
        - {kind(*k) for k in kinds}
    )
    note(
        "note",
        f"RBAC from the audit log: {len(kinds)} kinds of request sent, all granted:\n  "
        + ", ".join(sorted(kind(*k) for k in kinds))
        + f"\n{len(unused)} kinds granted but not sent by this one scenario (other paths: GC, "
        "restarts, PVCs, other schedulers; finalizers are checked at admission, never sent):\n  "
        + ", ".join(unused),
    )


def kind(group: str, resource: str, verb: str) -> str:
    return f"{verb} {resource}" + (f".{group}" if group else "")


def test_the_controller_runs_as_its_service_account_with_the_deployments_flags(
    cluster: Cluster,
    installed: subprocess.CompletedProcess[str],
    namespace: str,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    """The controller process with the Deployment's flags and the ServiceAccount's token runs a job
    to success, TTL and GC included, and stops cleanly on SIGTERM.

    Its RBAC is checked against what it really sent: the API server's audit log gives every
    (apiGroup, resource, verb) of this ServiceAccount, reads included; each must have been
    allowed and be granted by the installed roles. One scenario cannot exercise every path
    (orphan and stuck-pod GC, restarts, PVCs, KAI/Volcano/coscheduling/Kueue objects, Workload
    suspend), so the grants it did not use are reported as a note in the summary, not failed;
    `update` on */finalizers is checked by the API server while admitting an owner reference
    (when OwnerReferencesPermissionEnforcement is on), never sent as a request, so it never shows
    up here. test_the_roles_grant_nothing_beyond_the_needs keeps the roles equal to NEEDS."""
    deploy = cluster.get("deployment", "torchrun-controller", "-n", NAMESPACE)
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    metrics_port, health_port = free_port(), free_port()
    args = [
        *container["args"],
        f"--kubeconfig={service_account_kubeconfig(cluster, tmp_path / 'sa.kubeconfig')}",
        f"--namespace={namespace}",  # this test's jobs only; the rights are cluster-wide anyway
        f"--metrics-addr=127.0.0.1:{metrics_port}",
        f"--health-addr=127.0.0.1:{health_port}",
        "--gc-interval=1",
    ]
    suffix = uuid.uuid4().hex[:6]
    storage_class, queue = f"cfg-{suffix}", f"cfg-{suffix}"
    log_path = tmp_path / "controller.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cmd.main", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": ""},
        )
    try:
        cluster.apply(
            [
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": storage_class},
                    "provisioner": "kubernetes.io/no-provisioner",
                },
                {
                    "apiVersion": "torchrun.ai/v1alpha1",
                    "kind": "TorchrunQueue",
                    "metadata": {"name": queue},
                    "spec": {
                        "nodeResources": {"gpus": 8, "cpus": "90", "memory": "900Gi"},
                        "image": "pytorch/pytorch:2.4.0",
                        "storage": {"workspace": {"storageClassName": storage_class}},
                        "podAnnotations": {
                            "kwok.torchrun.ai/outcome": "succeed",
                            "kwok.torchrun.ai/duration": "2s",
                        },
                    },
                },
            ]
        )
        cluster.apply(
            {
                "apiVersion": "torchrun.ai/v1alpha1",
                "kind": "TorchrunJob",
                "metadata": {"name": "train"},
                "spec": {
                    "jobQueue": queue,
                    "numNodes": 1,
                    "command": "python train.py",
                    "workspace": {"source": "none"},
                    "ttlSecondsAfterFinished": 3,
                },
            },
            namespace,
        )
        # a user's Service reusing our label key: the garbage collector must never take it
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "ghost", "labels": {"torchrun-job-name": "ghost"}},
                "spec": {"clusterIP": "None", "ports": [{"port": 29400}]},
            },
            namespace,
        )

        def log_text() -> str:
            assert proc.poll() is None, f"the controller exited {proc.returncode}:\n{log_path.read_text()}"
            return log_path.read_text()

        lease = wait_until(
            lambda: cluster.get("lease", "torchrun-controller", "-n", NAMESPACE)["spec"].get(
                "holderIdentity"
            ),
            timeout=30,
            message="the controller to take the Lease in its namespace",
        )
        wait_until(lambda: "caches synced" in log_text(), timeout=60, message="caches synced")
        # the job runs to success, then ttlSecondsAfterFinished deletes it
        wait_until(
            lambda: (
                cluster.get("torchrunjob", "train", "-n", namespace).get("status", {}).get("phase")
                == "Succeeded"
            ),
            timeout=60,
            message=f"the job to succeed; controller log:\n{log_path.read_text()}",
        )
        wait_until(
            lambda: (
                cluster.kubectl("get", "torchrunjob", "train", "-n", namespace, check=False).returncode != 0
            ),
            timeout=30,
            message="the TTL to delete the job",
        )
        # --gc-interval=1 and the job ran for seconds: many passes, and the Service is still there
        assert cluster.get("service", "ghost", "-n", namespace)["metadata"].get("deletionTimestamp") is None
        events = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=train")
        assert {"Admitted", "Succeeded"} <= {e["reason"] for e in events["items"]}
        log_text()
        # not one request was refused: the RBAC covers everything this run did
        refused = [
            line
            for line in scrape(metrics_port).splitlines()
            if line.startswith("rest_client_requests_total") and 'code="403"' in line
        ]
        assert not refused, refused
        assert "forbidden" not in log_path.read_text().lower()

        # SIGTERM, as the kubelet sends it: drain, release the Lease, exit 0 within the grace period
        proc.send_signal(signal.SIGTERM)
        grace = deploy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert proc.wait(timeout=grace) == 0, log_path.read_text()
        released = cluster.get("lease", "torchrun-controller", "-n", NAMESPACE)["spec"]
        assert released.get("holderIdentity") in (None, ""), (lease, released)
        audit.flush(cluster, namespace)
        check_rbac_against_the_audit_log(cluster, record_property)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        cluster.kubectl("delete", "torchrunqueue", queue, "--ignore-not-found", "--wait=false", check=False)
        cluster.kubectl("delete", "storageclass", storage_class, "--ignore-not-found", check=False)
