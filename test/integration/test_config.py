"""config/ on the real control plane: installed the way docs/install.md says, accepted by the
kube-apiserver (Pod Security "restricted" included), and its RBAC is exactly what the controller
uses — proven by running the controller process with the Deployment's own flags under the
ServiceAccount's token through every path its roles grant a verb for, then reading what it sent
from the API server's audit log: every request granted, every grant used (or listed in
UNUSED_GRANTS with why it cannot be here), and nothing dangerous granted.

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
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import audit
import pytest
import yaml
from audit import Request
from testbed import REPO, UNVERIFIED, Cluster, condition, wait_until
from uploads import archive, upload, wait_running

CONFIG = REPO / "config"
NAMESPACE = "torchrun-system"
SERVICE_ACCOUNT = "torchrun-controller"
USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]


class Need(NamedTuple):
    """Verbs on a resource; `namespace` "" means in every namespace (or cluster-scoped)."""

    group: str
    resource: str  # "plural" or "plural/subresource"
    verbs: tuple[str, ...]
    why: str
    namespace: str = ""
    name: str = ""


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
        ("Service", "torchrun-controller-progress"),
        ("NetworkPolicy", "torchrun-controller"),
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
    assert [d["kind"] for d in render(cluster, CONFIG / "prometheus")] == [
        "PodMonitor",
        "PrometheusRule",
        "ServiceMonitor",
    ]
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
            if "nonResourceURLs" in rule:  # a URL, not a resource (the issuer's keys): not audited as one
                continue
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [""]:
                            granted.add((ns, group, resource, verb, name))
    return granted


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


class Grant(NamedTuple):
    """One verb on one resource that a Role or ClusterRole of config/ grants."""

    namespace: str  # "" for a ClusterRole's: every namespace
    group: str
    resource: str  # "plural" or "plural/subresource"
    verb: str
    name: str  # "" for any name

    @property
    def kind(self) -> tuple[str, str, str]:
        return self.group, self.resource, self.verb

    def allows(self, request: Request) -> bool:
        return (
            self.kind == (request.group, request.resource, request.verb)
            and self.namespace in ("", request.namespace)
            and self.name in ("", request.name)
        )


def grants(objects: list[dict[str, Any]]) -> set[Grant]:
    return {Grant(*g) for g in rules(objects)}


# The grants the run below cannot use, each with why. Every other grant must be used by it (the
# audit log shows the request), and each grant listed here must be granted and unused: a grant
# nobody uses and nobody explains fails, and so does an explanation that went stale.
_NOT_INSTALLED = (
    "the scheduler's CRDs are not installed in this module (test_schedulers.py installs them for its "
    "own tests, and removing CRDs costs the API server minutes), so the controller never starts its "
    "informer or writes these objects here"
)
UNUSED_GRANTS: dict[tuple[str, str, str], str] = {
    **{
        ("torchrun.ai", f"{kind}/finalizers", "update"): (
            "lets the controller set blockOwnerDeletion on the owner references of what a "
            f"{kind[:-1]} owns, on clusters running the OwnerReferencesPermissionEnforcement "
            "admission plugin: checked at admission, never a request of its own"
        )
        for kind in ("torchrunjobs", "torchrunqueues")
    },
    ("", "nodes", "get"): (
        "the garbage collector reads the node of a pod stuck terminating, only once its deletion is "
        "60 s overdue (no flag shortens that); test_gc.py forces such a pass in-process"
    ),
    **{
        kind: (
            "the leader labels its own pod and unlabels the other replicas only in a pod (POD_NAME from "
            "the downward API), and this run is a process: test_leader_label.py proves those writes"
        )
        for kind in (("", "pods", "patch"), ("apps", "replicasets", "get"))
    },
    **{
        (group, resource, verb): _NOT_INSTALLED
        for group, resource, verbs in (
            ("scheduling.run.ai", "queues", ("list", "watch", "create", "patch", "delete")),
            ("scheduling.run.ai", "podgroups", ("get", "list", "watch", "create", "patch")),
            ("scheduling.x-k8s.io", "podgroups", ("get", "list", "watch", "create", "patch")),
            ("scheduling.volcano.sh", "podgroups", ("get", "list", "watch", "create", "patch")),
            ("kueue.x-k8s.io", "workloads", ("list", "watch", "patch")),
        )
        for verb in verbs
    },
}


def ungranted_uses(granted: set[Grant], used: Iterable[Request]) -> list[Request]:
    """The requests no grant of config/ allows."""
    return sorted(r for r in used if not any(g.allows(r) for g in granted))


def unused_grants(
    granted: set[Grant], used: Iterable[Request], explained: Mapping[tuple[str, str, str], str]
) -> tuple[list[Grant], list[tuple[str, str, str]]]:
    """(grants no request used and `explained` does not list, entries of `explained` that are not
    granted or were used after all)."""
    used = list(used)
    idle = {g for g in granted if not any(g.allows(r) for r in used)}
    unexplained = sorted(g for g in idle if g.kind not in explained)
    idle_kinds = {g.kind for g in idle}
    stale = sorted(k for k in explained if k not in idle_kinds or any(g.kind == k for g in granted - idle))
    return unexplained, stale


def check_rbac_against_the_audit_log(cluster: Cluster, note: Callable[[str, object], None]) -> None:
    """The roles of config/ are what the ServiceAccount used, no more and no less: every request
    it really sent (audit log) was allowed when sent, is granted by config/'s roles and by the
    authorizer now (SubjectAccessReview, with its namespace and name), and every grant was used
    by one of those requests or is in UNUSED_GRANTS with why."""
    used = audit.requests_by(cluster, USER)
    assert used, "the audit log has no request of the ServiceAccount"
    refused = sorted(
        {
            (r, decision)
            for r, events in used.items()
            for e in events
            if (decision := audit.decided(e)) != "allow"
        }
    )
    assert not refused, f"requests the API server did not authorize: {refused}"
    granted = grants(render(cluster, CONFIG))
    assert not any("*" in field for g in granted for field in g), "no wildcards"
    not_in_config = ungranted_uses(granted, used)
    assert not not_in_config, f"the controller sent these, config/rbac grants them nowhere: {not_in_config}"
    needs = [Need(r.group, r.resource, (r.verb,), "audit log", r.namespace, r.name) for r in used]
    refused_now = sorted(
        f"{v} {n.resource}.{n.group} in {n.namespace or 'all'} {n.name}"
        for (n, v), ok in allowed(cluster, needs).items()
        if not ok
    )
    assert not refused_now, f"the controller sent these, the installed roles do not grant them: {refused_now}"
    unexplained, stale = unused_grants(granted, used, UNUSED_GRANTS)
    assert not unexplained, (
        "config/rbac grants these and the controller never used them in this run: make the run use "
        f"them, or drop them from config/rbac, or list them in UNUSED_GRANTS with why: {unexplained}"
    )
    assert not stale, f"UNUSED_GRANTS lists grants that are not granted, or were used: {stale}"
    kinds = sorted({f"{r.verb} {r.resource}" + (f".{r.group}" if r.group else "") for r in used})
    note(
        "note",
        f"RBAC from the audit log: every grant of config/rbac used but {len(UNUSED_GRANTS)} listed in "
        f"UNUSED_GRANTS; {len(kinds)} kinds of request sent, all granted:\n  " + ", ".join(kinds),
    )


# -- what the controller is made to do, as its ServiceAccount --------------------------------------

RUN = {"kwok.torchrun.ai/outcome": "run"}
SUCCEED = {"kwok.torchrun.ai/outcome": "succeed", "kwok.torchrun.ai/duration": "2s"}
FAIL = {
    "kwok.torchrun.ai/outcome": "fail",
    "kwok.torchrun.ai/duration": "1s",
    "kwok.torchrun.ai/exit-code": "1",
}
SMALL = {"gpus": 1, "cpus": "4", "memory": "16Gi"}  # many fit on one node: no capacity waits
NOWHERE = {"torchrun.ai/test-node": "none"}  # a pod with this nodeSelector is never scheduled


class Run(NamedTuple):
    """The namespace of the run and the queues it made: `done` (a StorageClass with no
    provisioner, workers succeed), `forever` (the default StorageClass, workers run until
    stopped), `failing` (workers fail with exit code 1)."""

    namespace: str
    done: str
    forever: str
    failing: str


def queues(cluster: Cluster, namespace: str, suffix: str, storage_class: str) -> Run:
    def queue(name: str, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
        body = {"nodeResources": SMALL, "image": "pytorch/pytorch:2.4.0", "podAnnotations": annotations}
        meta = {"name": name}
        return {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": meta,
            "spec": {**body, **spec},
        }

    names = (f"cfg-{suffix}", f"cfg-{suffix}-run", f"cfg-{suffix}-fail")
    cluster.apply(
        [
            queue(names[0], SUCCEED, storage={"workspace": {"storageClassName": storage_class}}),
            queue(names[1], RUN),
            queue(names[2], FAIL),
        ]
    )
    return Run(namespace, *names)


def submit(cluster: Cluster, ns: str, name: str, queue: str, **spec: Any) -> None:
    body = {"jobQueue": queue, "numNodes": 1, "command": "python train.py", "workspace": {"source": "none"}}
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": name},
            "spec": {**body, **spec},
        },
        ns,
    )


def reason_is(
    cluster: Cluster, ns: str, job: str, ctype: str, reason: str, timeout: float = 60
) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        obj = cluster.get("torchrunjob", job, "-n", ns)
        return obj if (condition(obj, ctype) or {}).get("reason") == reason else None

    found: dict[str, Any] = wait_until(reached, timeout, message=f"{job}: {ctype} {reason}")
    return found


def foreign(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    """An object of someone else's under a name a job's child takes: no label, no owner."""
    api = {"Job": "batch/v1"}.get(kind, "v1")
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": spec}


def pod_spec(**spec: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never", **spec}


def claim_spec(storage_class: str) -> dict[str, Any]:
    return {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": storage_class,
    }


def names_taken_by_others(cluster: Cluster, run: Run, storage_class: str) -> None:
    """Each job finds a child's name taken by an object the controller's caches cannot see (they
    select our label): its create is refused, one GET tells it the object is not its own, and the
    job waits with Admitted=False NameConflict, the object untouched."""
    ns = run.namespace
    cluster.apply(
        [
            foreign("Service", "c-svc", clusterIP="None", ports=[{"port": 29400}]),
            foreign("Job", "c-job", suspend=True, template={"spec": pod_spec()}),
            foreign("PersistentVolumeClaim", "c-pvc-workspace", **claim_spec(storage_class)),
            foreign("Pod", "c-pod-sync-0", **pod_spec(nodeSelector=NOWHERE)),
        ],
        ns,
    )
    submit(cluster, ns, "c-svc", run.done)
    submit(cluster, ns, "c-job", run.done)
    submit(cluster, ns, "c-pvc", run.done, workspace={"source": "upload"})
    submit(cluster, ns, "c-pod", run.done, workspace={"source": "upload"})
    taken = {"c-svc": "Service", "c-job": "Job", "c-pvc": "PersistentVolumeClaim", "c-pod": "Pod"}
    for job, kind in taken.items():
        waiting = reason_is(cluster, ns, job, "Admitted", "NameConflict")
        assert f"{kind} {ns}/" in condition(waiting, "Admitted")["message"], job
    for kind, name in (
        ("service", "c-svc"),
        ("job", "c-job"),
        ("pvc", "c-pvc-workspace"),
        ("pod", "c-pod-sync-0"),
    ):
        meta = cluster.get(kind, name, "-n", ns)["metadata"]
        assert not meta.get("ownerReferences") and not meta.get("deletionTimestamp"), (kind, name)


def an_unbound_claim_is_reported_with_its_events(cluster: Cluster, run: Run) -> None:
    """--claim-bind-timeout=1: the workspace claim of a class with no provisioner is quoted with
    its Events (a list of Events) in WorkspaceReady=False ClaimNotBound."""
    submit(cluster, run.namespace, "unbound", run.done, workspace={"source": "upload"})
    reason_is(cluster, run.namespace, "unbound", "WorkspaceReady", "ClaimNotBound")


def an_elastic_job_grows_its_service_is_kept_and_it_is_suspended_twice(cluster: Cluster, run: Run) -> None:
    """The autoscaler patches the job's status (desiredNodes 2), the reconciler the worker Job's
    parallelism; the Service's spec changed by hand is patched back; suspend, resume and suspend
    again patch the Job's suspend, and the second Suspended Event is the first one's count bumped."""
    ns = run.namespace
    elastic = {"minNodes": 1, "maxNodes": 2}
    submit(cluster, ns, "grow", run.forever, elastic=elastic, distributed={"maxRestarts": 3})
    wait_until(
        lambda: cluster.get("job", "grow", "-n", ns)["spec"]["parallelism"] == 2, 60, message="grown to 2"
    )
    reason_is(cluster, ns, "grow", "Running", "AllWorkersRunning")
    merge_patch(cluster, ns, "service", "grow", {"spec": {"publishNotReadyAddresses": False}})
    wait_until(
        # absent until patched back (False is the default the user's patch leaves)
        lambda: cluster.get("service", "grow", "-n", ns)["spec"].get("publishNotReadyAddresses") is True,
        30,
        message="the Service's spec patched back",
    )
    for suspend in (True, False, True):
        merge_patch(cluster, ns, "torchrunjob", "grow", {"spec": {"suspend": suspend}})
        reason_is(cluster, ns, "grow", "Running", "Suspended" if suspend else "AllWorkersRunning")
    wait_until(
        lambda: any(
            e["reason"] == "Suspended" and e.get("count") == 2
            for e in cluster.get("events", "-n", ns, "--field-selector", "involvedObject.name=grow")["items"]
        ),
        30,
        message="the Suspended Event counted twice",
    )


def a_hot_reload_evicts_the_workers(cluster: Cluster, run: Run) -> None:
    """An upload job: its claim and sync pod; generation 1 uploaded, the worker is evicted onto
    it and the sync pod of generation 0 deleted."""
    ns = run.namespace
    submit(cluster, ns, "code", run.forever, workspace={"source": "upload"})
    uploaded(cluster, ns, "code", 0)
    reason_is(cluster, ns, "code", "Running", "AllWorkersRunning", timeout=90)
    before = worker_uids(cluster, ns, "code")
    merge_patch(cluster, ns, "torchrunjob", "code", {"spec": {"workspace": {"generation": 1}}})
    uploaded(cluster, ns, "code", 1)
    wait_until(lambda: worker_uids(cluster, ns, "code") - before, 60, message="the worker evicted, replaced")
    selector = "metadata.name=code-sync-0"
    wait_until(
        lambda: not cluster.get("pods", "-n", ns, "--field-selector", selector)["items"],
        60,
        message="code-sync-0 deleted",
    )


def uploaded(cluster: Cluster, ns: str, job: str, generation: int) -> None:
    """Generation `generation` of a job's code, uploaded into its sync pod as the plugin does."""
    pod = f"{job}-sync-{generation}"
    wait_running(cluster, ns, pod)
    sent = upload(cluster, ns, pod, archive({"train.py": f"print({generation})\n".encode()}), generation)
    assert sent.returncode == 0, sent.stderr.decode()


def a_failed_attempt_is_restarted(cluster: Cluster, run: Run) -> None:
    """failurePolicy.maxRestarts 1: the first attempt's worker Job is deleted, the second fails."""
    submit(cluster, run.namespace, "flaky", run.failing, failurePolicy={"maxRestarts": 1})
    failed = reason_is(cluster, run.namespace, "flaky", "Failed", "RestartLimitExceeded", timeout=90)
    assert failed["status"]["restarts"] == 1


def a_progress_report_is_reviewed(cluster: Cluster, run: Run, url: str) -> None:
    """A worker's reporter pushes progress: the controller reviews its pod-bound token
    (TokenReview) and writes status.progress."""
    ns = run.namespace
    submit(cluster, ns, "reporting", run.forever)
    selector = "torchrun-job-name=reporting,torchrun.ai/role=worker"

    def running_pod() -> dict[str, Any] | None:
        pods = cluster.get("pods", "-n", ns, "-l", selector)["items"]
        return next((p for p in pods if p["status"].get("phase") == "Running"), None)

    pod = wait_until(running_pod, 60, message="the reporting job's worker running")
    token = cluster.kubectl(
        "create", "token", pod["spec"].get("serviceAccountName") or "default", "-n", ns,
        "--audience", "torchrun-controller", "--bound-object-kind", "Pod",
        "--bound-object-name", pod["metadata"]["name"], "--bound-object-uid", pod["metadata"]["uid"],
    ).stdout.strip()  # fmt: skip
    body = {"job": "reporting", "record": {"step": 5, "total_steps": 10}, "secondsSinceChange": 0}
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Authorization": f"Bearer {token}"}, method="POST"
    )

    def accepted() -> bool:
        try:
            with urllib.request.urlopen(req, context=UNVERIFIED, timeout=10) as resp:
                return bool(resp.status == 200)
        except urllib.error.HTTPError as err:
            assert err.code == 503, err.read()  # not leading yet: the reporter retries the same way
            return False

    wait_until(accepted, 30, interval=1, message="the report accepted")
    wait_until(
        lambda: (cluster.get("torchrunjob", "reporting", "-n", ns).get("status") or {}).get("progress"),
        30,
        message="status.progress",
    )


def orphans_are_collected(cluster: Cluster, run: Run, storage_class: str) -> None:
    """With Kubernetes' garbage collector stopped (it would race ours), what a TorchrunJob that is
    gone owned is deleted by ours: it confirms the owner is gone with a GET, then deletes."""
    owner = {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunJob",
        "name": "gone",
        "uid": str(uuid.uuid4()),
        "controller": True,
    }
    orphans = [
        foreign("Service", "gone", clusterIP="None", ports=[{"port": 29400}]),
        foreign("Job", "gone", suspend=True, template={"spec": pod_spec()}),
        foreign("PersistentVolumeClaim", "gone-workspace", **claim_spec(storage_class)),
        foreign("Pod", "gone-sync-0", **pod_spec(nodeSelector=NOWHERE)),
    ]
    for obj in orphans:
        obj["metadata"].update(labels={"torchrun-job-name": "gone"}, ownerReferences=[owner])
    cluster.stop("kube-controller-manager")
    try:
        cluster.apply(orphans, run.namespace)
        for obj in orphans:
            kind, name = obj["kind"], obj["metadata"]["name"]
            wait_until(
                lambda k=kind, n=name: gone_or_deleting(cluster, run.namespace, k, n),
                30,
                message=f"orphan {kind} {name} collected",
            )
    finally:
        cluster.start("kube-controller-manager")


def merge_patch(cluster: Cluster, ns: str, kind: str, name: str, patch: dict[str, Any]) -> None:
    cluster.kubectl("patch", kind, name, "-n", ns, "--type=merge", "-p", json.dumps(patch))


def worker_uids(cluster: Cluster, ns: str, job: str) -> set[str]:
    selector = f"torchrun-job-name={job},torchrun.ai/role=worker"
    return {p["metadata"]["uid"] for p in cluster.get("pods", "-n", ns, "-l", selector)["items"]}


def gone_or_deleting(cluster: Cluster, ns: str, kind: str, name: str) -> bool:
    proc = cluster.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    return proc.returncode != 0 or bool(json.loads(proc.stdout)["metadata"].get("deletionTimestamp"))


def test_the_controller_runs_as_its_service_account_with_the_deployments_flags(
    cluster: Cluster,
    installed: subprocess.CompletedProcess[str],
    namespace: str,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    """The controller process with the Deployment's flags and the ServiceAccount's token runs a job
    to success, TTL and GC included, is made to take every path its roles grant a verb for (the
    steps above: name conflicts, an unbound claim, a restart, the autoscaler, a Service's drift,
    suspend, a hot reload, a progress report and its TokenReview, orphans), and stops cleanly on
    SIGTERM.

    Its RBAC is then checked against what it really sent (`check_rbac_against_the_audit_log`):
    every request granted, every grant used or listed in UNUSED_GRANTS with why. Three flags are
    added to the Deployment's so that timers the run waits for are short: --gc-interval=1,
    --autoscaler-period=1, --claim-bind-timeout=1; and --progress-bind-address moves the progress
    endpoint to a free loopback port."""
    deploy = cluster.get("deployment", "torchrun-controller", "-n", NAMESPACE)
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    metrics_port, health_port, progress_port = free_port(), free_port(), free_port()
    args = [
        *container["args"],
        f"--kubeconfig={service_account_kubeconfig(cluster, tmp_path / 'sa.kubeconfig')}",
        f"--namespace={namespace}",  # this test's jobs only; the rights are cluster-wide anyway
        f"--metrics-addr=127.0.0.1:{metrics_port}",
        f"--health-addr=127.0.0.1:{health_port}",
        "--gc-interval=1",
        "--autoscaler-period=1",
        "--claim-bind-timeout=1",
        f"--progress-bind-address=127.0.0.1:{progress_port}",
    ]
    suffix = uuid.uuid4().hex[:6]
    storage_class = f"cfg-{suffix}"
    log_path = tmp_path / "controller.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cmd.main", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": ""},
        )
    run = Run(namespace, "", "", "")
    try:
        cluster.apply(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": storage_class},
                "provisioner": "kubernetes.io/no-provisioner",
            }
        )
        run = queues(cluster, namespace, suffix, storage_class)
        submit(cluster, namespace, "train", run.done, ttlSecondsAfterFinished=3)
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
        reason_is(cluster, namespace, "train", "Succeeded", "Succeeded")
        wait_until(
            lambda: not cluster.found("torchrunjob", "train", "-n", namespace),
            timeout=30,
            message="the TTL to delete the job",
        )
        names_taken_by_others(cluster, run, storage_class)
        an_unbound_claim_is_reported_with_its_events(cluster, run)
        a_failed_attempt_is_restarted(cluster, run)
        an_elastic_job_grows_its_service_is_kept_and_it_is_suspended_twice(cluster, run)
        a_hot_reload_evicts_the_workers(cluster, run)
        a_progress_report_is_reviewed(cluster, run, f"https://127.0.0.1:{progress_port}/v1/progress")
        orphans_are_collected(cluster, run, storage_class)
        # --gc-interval=1 and the run took a while: many passes, and the Service is still there
        assert cluster.get("service", "ghost", "-n", namespace)["metadata"].get("deletionTimestamp") is None
        events = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=train")
        assert "Succeeded" in {e["reason"] for e in events["items"]}
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
        made = [q for q in (run.done, run.forever, run.failing) if q]
        if made:
            cluster.kubectl(
                "delete", "torchrunqueue", *made, "--ignore-not-found", "--wait=false", check=False
            )
        cluster.kubectl("delete", "storageclass", storage_class, "--ignore-not-found", check=False)
