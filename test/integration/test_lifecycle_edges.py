"""Lifecycle edges on the real control plane (SPEC §6): a deadline that passes while the job is
still waiting for its code, and nodes lost under a running job.

The node test runs what Kubernetes itself does when a node is lost, with nothing played by the
test but the node's death: a kube-controller-manager of the test's own runs the node lifecycle
and taint eviction controllers (the test bed's runs neither), kwok's fake kubelet stops when the
test takes the node's Lease from it, and the test bed's pod garbage collector removes the pods of
a node that was deleted.
"""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from jobs import make_job, queue_manifest
from testbed import Cluster, condition, kubectl_binary, wait_until
from uploads import wait_running

from controller.api import JOB_LABEL
from controller.cmd.main import App
from controller.pods import COMPLETION_INDEX_ANNOTATION
from controller.rest import RESTClient
from controller.rest.resources import PODS

GRACE = 20  # --node-monitor-grace-period of the test's node lifecycle controller: kwok renews every 10 s


def tj(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.get("torchrunjob", name, "-n", ns)


def when(obj: dict[str, Any], field: str) -> datetime:
    return datetime.fromisoformat(obj["status"][field].replace("Z", "+00:00"))


def job_pods(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", ns, "-l", f"{JOB_LABEL}={name}")["items"]
    return items


# -- a deadline while syncing ------------------------------------------------------------------


def test_a_deadline_that_passes_while_syncing_fails_the_job_and_stops_its_sync(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    """activeDeadlineSeconds counts from the start, sync included (SPEC §6): a job whose upload
    never comes fails `DeadlineExceeded` about 10 s after it started, no worker Job is ever made,
    and its sync pod — which would wait for the upload until --upload-timeout (an hour) — is
    removed; the workspace claim stays with the job (no --autoclean)."""
    deadline = 10
    queue = f"q-{uuid.uuid4().hex[:6]}"
    cluster.apply(queue_manifest(queue, "succeed", "2s"))
    start_controller()
    upload = {"source": "upload"}
    make_job(cluster, namespace, queue, "late", workspace=upload, activeDeadlineSeconds=deadline)
    wait_running(cluster, namespace, "late-sync-0")
    assert tj(cluster, namespace, "late")["status"]["phase"] == "Syncing"

    failed = wait_until(
        lambda: (j := tj(cluster, namespace, "late"))["status"].get("phase") == "Failed" and j,
        deadline + 30,
        message="Failed",
    )
    assert condition(failed, "Failed")["reason"] == "DeadlineExceeded", failed["status"]
    took = (when(failed, "completionTime") - when(failed, "startTime")).total_seconds()
    assert deadline <= took <= deadline + 5, f"failed {took}s after its start"
    wait_until(lambda: not job_pods(cluster, namespace, "late"), 30, message="the sync pod removed")
    assert not cluster.get("jobs", "-n", namespace)["items"], "a worker Job was made without the code"
    cluster.get("pvc", "late-workspace", "-n", namespace)  # storage stays with the job
    cluster.kubectl("delete", "torchrunqueue", queue, "--wait=false")


# -- nodes lost under a running job ------------------------------------------------------------


def node_manifest(name: str, pool: str) -> dict[str, Any]:
    """A fake 8-GPU node of kwok's, like hack/controlplane.sh's, labelled with `pool`."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", "torchrun-test/pool": pool},
        },
        "spec": {},
        "status": {
            "capacity": {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"},
        },
    }


@pytest.fixture
def pool(cluster: Cluster, namespace: str) -> Iterator[str]:
    """Three fake nodes of the test's own, labelled `torchrun-test/pool=<the value yielded>`.

    At the end the test's pods go first, while kwok still runs their nodes, then the nodes. The
    jobs go before the pods: a pod of a job that retries its exit code (143, what a deleted pod
    exits with here) keeps the Job controller's finalizer until the pod's replacement is made
    (backoffLimitPerIndex), which a namespace being deleted never allows — unless its Job is
    being deleted too."""
    label = uuid.uuid4().hex[:6]
    names = [f"lost-{label}-{i}" for i in range(3)]
    cluster.kubectl("apply", "-f", "-", input="\n".join(json.dumps(node_manifest(n, label)) for n in names))
    cluster.kubectl("wait", "--for=condition=Ready", "--timeout=60s", *(f"node/{n}" for n in names))
    yield label
    for kind in ("torchrunjobs", "jobs"):
        cluster.kubectl("delete", kind, "--all", "-n", namespace, "--wait=false")
    cluster.delete_namespace(namespace)
    cluster.kubectl("delete", "node", "--ignore-not-found", "--wait=false", *names)


@contextmanager
def node_lifecycle(cluster: Cluster, log: Path) -> Iterator[None]:
    """kube-controller-manager's node lifecycle and taint eviction controllers, as a cluster runs
    them (the pinned binary, its own service-account credentials), with a short grace period."""
    binary = kubectl_binary().parent / "kube-controller-manager"
    kubeconfig = str(cluster.run_dir / "controller-manager.kubeconfig")
    command = [
        str(binary), "--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig,
        "--authorization-kubeconfig", kubeconfig, "--use-service-account-credentials",
        "--controllers", "node-lifecycle-controller,taint-eviction-controller",
        "--node-monitor-grace-period", f"{GRACE}s", "--node-monitor-period", "1s",
        "--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "0", "-v=2",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield
        finally:
            proc.terminate()
            proc.wait(30)


def lease_holder(cluster: Cluster, node: str) -> str | None:
    lease = cluster.get("lease", node, "-n", "kube-node-lease")
    return (lease.get("spec") or {}).get("holderIdentity")


def stop_kubelet(cluster: Cluster, node: str) -> str:
    """The node's kubelet dies: its Lease, taken from kwok, is renewed no more, and kwok neither
    heartbeats the node nor moves its pods while it does not hold that Lease. Returns kwok's
    identity."""
    kwok = lease_holder(cluster, node)
    assert kwok, f"kwok holds no Lease of {node}"
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    spec = {"holderIdentity": "dead-kubelet", "renewTime": now, "leaseDurationSeconds": 3600}
    patch = json.dumps({"spec": spec})
    cluster.kubectl("patch", "lease", node, "-n", "kube-node-lease", "--type=merge", "-p", patch)
    return kwok


def start_kubelet(cluster: Cluster, node: str, kwok: str, pods: list[dict[str, Any]]) -> None:
    """The kubelet is back: kwok creates the node's Lease again and runs the node from then on.

    A kubelet that starts syncs every pod bound to its node; kwok lists them when it takes the
    Lease, but may look before its own cache has that Lease, take itself for a reader, and then
    leave them until its next resync minutes later. A pod event once it holds the Lease (an
    annotation: nothing any controller reads) makes it look at each of `pods` again, until it
    has stopped them."""
    cluster.kubectl("delete", "lease", node, "-n", "kube-node-lease")
    wait_until(lambda: lease_holder(cluster, node) == kwok, 30, message=f"kwok to hold {node}'s Lease")

    def stopped() -> bool:
        left = False
        for pod in pods:
            name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
            got = cluster.kubectl("get", "pod", name, "-n", ns, "-o", "json", check=False)
            if got.returncode == 0 and json.loads(got.stdout)["status"].get("phase") in (
                "Running",
                "Pending",
            ):
                left = True
                poke = f"testbed/kubelet-sync={uuid.uuid4().hex}"
                cluster.kubectl("annotate", "pod", name, "-n", ns, "--overwrite", poke, check=False)
        return not left

    wait_until(stopped, 30, interval=1.0, message=f"the pods on {node} stopped by its kubelet")


class PodHistory:
    """Every version of the job's pods the API server sent, from a watch (a pod that ends is gone
    a moment later: polling would miss how it ended)."""

    def __init__(self, rest: RESTClient, ns: str, job: str) -> None:
        self.versions: list[dict[str, Any]] = []
        self._stream = rest.watch(PODS, ns, label_selector=f"{JOB_LABEL}={job}", allow_bookmarks=False)
        self._thread = threading.Thread(target=self._record, daemon=True)
        self._thread.start()

    def _record(self) -> None:
        for event in self._stream:
            self.versions.append(event.object)

    def stop(self) -> None:
        self._stream.stop()
        self._thread.join(10)

    def of_node(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self.versions if p["spec"].get("nodeName") == node]


def being_deleted(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def disruption(pod: dict[str, Any]) -> str | None:
    c = condition(pod, "DisruptionTarget")
    return c["reason"] if c and c["status"] == "True" else None


def failed(pod: dict[str, Any]) -> bool:
    return bool(pod["status"].get("phase") == "Failed")


def running_on_two(cluster: Cluster, ns: str, name: str, lost: set[str]) -> dict[str, Any] | None:
    """The job, once Running with two workers and nothing else: two pods, both running and none
    of them one of the `lost` pods (by UID)."""
    job = tj(cluster, ns, name)
    running = condition(job, "Running")
    pods = job_pods(cluster, ns, name)
    live = [p for p in pods if p["status"].get("phase") == "Running" and not being_deleted(p)]
    fresh = not {p["metadata"]["uid"] for p in pods} & lost
    return job if running and running["status"] == "True" and len(pods) == len(live) == 2 and fresh else None


def test_an_evicted_rank_starts_every_rank_again_at_once_uncounted(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App], rest: RESTClient
) -> None:
    """A 2-node job that recreates its pods (the default): rank 1's pod evicted (what a drain
    does). Its torchrun cannot take a replaced node back, so the controller starts a new attempt
    at once — a new worker Job, two new pods — counted in `status.disruptions`, not in
    `restarts`, with one `Restarting` Event naming the pod; the job runs again on two workers."""
    queue = f"q-{uuid.uuid4().hex[:6]}"
    cluster.apply(queue_manifest(queue, "run"))
    start_controller()
    make_job(cluster, namespace, queue, "ev")
    wait_until(lambda: running_on_two(cluster, namespace, "ev", set()), 60, message="Running")
    first = cluster.get("job", "ev", "-n", namespace)["metadata"]["uid"]
    pods = {
        p["metadata"]["annotations"][COMPLETION_INDEX_ANNOTATION]: p
        for p in job_pods(cluster, namespace, "ev")
    }
    evicted = pods["1"]["metadata"]
    rest.evict(PODS, evicted["name"], namespace, uid=evicted["uid"])
    lost = {p["metadata"]["uid"] for p in pods.values()}
    job = wait_until(lambda: running_on_two(cluster, namespace, "ev", lost), 90, message="running again")
    worker = cluster.get("job", "ev", "-n", namespace)
    assert worker["metadata"]["uid"] != first, "the same worker Job: only the evicted pod was replaced"
    assert worker["metadata"]["annotations"]["torchrun.ai/restart"] == "1", worker["metadata"]
    status = job["status"]
    assert status["restarts"] == 0 and status["disruptions"] == 1 and not status.get("restartsByReason"), (
        status
    )

    def restarting() -> list[str]:
        events = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=ev")["items"]
        kinds = ("Restarting", "TorchrunJob")
        return [e["message"] for e in events if (e["reason"], e["involvedObject"]["kind"]) == kinds]

    said = wait_until(restarting, 30, message="the Restarting Event")
    assert len(said) == 1 and f"node rank 1's pod {evicted['name']} was disrupted" in said[0], said
    cluster.kubectl("delete", "torchrunqueue", queue, "--wait=false")


def test_nodes_lost_under_a_running_job_are_disruptions_not_failures(
    cluster: Cluster,
    namespace: str,
    start_controller: Callable[..., App],
    rest: RESTClient,
    pool: str,
    tmp_path: Path,
) -> None:
    """A 2-node job runs on two of three fake nodes. One node's kubelet dies: after the grace
    period the node lifecycle controller taints it `unreachable:NoExecute`, the taint eviction
    controller marks the pod `DisruptionTarget` (DeletionByTaintManager) and deletes it, and when
    the kubelet comes back it stops the pod (exit 143). The other node is deleted: the pod garbage
    collector marks its pod Failed with `DisruptionTarget` (DeletionByPodGC). Both are
    disruptions: the job — which retries exit code 143 — counts neither a retriable failure nor a
    restart; its torchrun cannot take a replaced node back (`distributed.maxRestarts` 0), so every
    rank starts again at once in a new attempt (`status.disruptions`), which runs on two nodes.
    (The queue tolerates an unreachable node for 0 s instead of the API server's default 300 s.)"""
    queue = f"q-{uuid.uuid4().hex[:6]}"
    unreachable = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}
        for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    ]
    scheduling = {"nodeSelector": {"torchrun-test/pool": pool}, "tolerations": unreachable}
    cluster.apply(queue_manifest(queue, "run", scheduling=scheduling))
    with node_lifecycle(cluster, tmp_path / "kube-controller-manager.log"):
        start_controller()
        make_job(cluster, namespace, queue, "lost", failurePolicy={"retriableExitCodes": [143]})
        wait_until(lambda: running_on_two(cluster, namespace, "lost", set()), 60, message="Running")
        pods = job_pods(cluster, namespace, "lost")
        lost = {p["metadata"]["uid"] for p in pods}
        node = {
            p["metadata"]["annotations"][COMPLETION_INDEX_ANNOTATION]: p["spec"]["nodeName"] for p in pods
        }
        dead, deleted = node["0"], node["1"]
        history = PodHistory(rest, namespace, "lost")
        try:
            kwok = stop_kubelet(cluster, dead)
            cluster.kubectl("delete", "node", deleted)
            wait_until(
                lambda: any(disruption(p) and being_deleted(p) for p in history.of_node(dead)),
                GRACE + 30,
                interval=0.5,
                message=f"the pod on {dead} evicted for the taint",
            )
            start_kubelet(cluster, dead, kwok, [p for p in pods if p["spec"]["nodeName"] == dead])
            job = wait_until(
                lambda: running_on_two(cluster, namespace, "lost", lost),
                120,
                interval=1.0,
                message="the job running again on two new workers",
            )
        finally:
            history.stop()

    on_dead, on_deleted = history.of_node(dead), history.of_node(deleted)
    # the new attempt deletes the old worker Job at the first disruption: its pods lose the Job's
    # tracking finalizer, so one that fails later (the dead node's, exit 143 once its kubelet is
    # back; the deleted node's, failed by the pod GC) may be gone before it is seen failed
    dead_lost = [p for p in on_dead if p["metadata"]["uid"] in lost]
    assert {disruption(p) for p in dead_lost} - {None} == {"DeletionByTaintManager"}, [
        p["status"] for p in on_dead
    ]
    assert all(disruption(p) == "DeletionByTaintManager" for p in dead_lost if failed(p)), dead_lost
    assert all(disruption(p) == "DeletionByPodGC" for p in on_deleted if failed(p)), on_deleted
    status = job["status"]
    assert status["restarts"] == 0 and status.get("retriableFailures", 0) == 0, status
    assert status.get("disruptions", 0) >= 1, status
    events = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=lost")["items"]
    said = [e for e in events if e["involvedObject"]["kind"] == "TorchrunJob"]
    assert "RetriableFailure" not in {e["reason"] for e in said}, said
    restarting = [e["message"] for e in said if e["reason"] == "Restarting"]
    assert restarting and all("not counted as a restart" in m for m in restarting), restarting
    cluster.kubectl("delete", "torchrunqueue", queue, "--wait=false")
