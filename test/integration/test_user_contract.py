"""What users rely on, on the real control plane: the queue's placement and identity settings
reach the worker pods the kube-scheduler and admission see, an unschedulable job says why,
deleting a job takes its objects with it, and a queue naming a missing StorageClass holds its
jobs back. Everything here is real (kube-apiserver admission, kube-scheduler, the
kube-controller-manager's garbage collector); only the pods' lifecycle is kwok's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import audit
import pytest
from jobs import condition, make_job, queue_manifest
from testbed import Cluster, wait_until

from controller.cmd.main import App

KUBE_GC = "system:serviceaccount:kube-system:generic-garbage-collector"


@pytest.fixture
def cluster_objects(cluster: Cluster) -> Iterator[list[tuple[str, ...]]]:
    """What a test changes outside its namespace, as kubectl arguments that undo it (`delete`
    is added unless they start with `taint`); undone afterwards, last first."""
    created: list[tuple[str, ...]] = []
    yield created
    for args in reversed(created):
        if args[0] == "taint":
            cluster.kubectl(*args, check=False)
        else:
            cluster.kubectl("delete", *args, "--ignore-not-found", "--wait=false", check=False)


def make_queue(cluster: Cluster, created: list[tuple[str, ...]], outcome: str = "run", **spec: Any) -> str:
    name = f"uc-{uuid.uuid4().hex[:6]}"
    body = queue_manifest(name, outcome, "1s", **spec)
    cluster.apply(body)
    created.append(("torchrunqueue", name))
    return name


def tj(cluster: Cluster, ns: str, name: str = "train") -> dict[str, Any]:
    return cluster.get("torchrunjob", name, "-n", ns)


def worker_pods(cluster: Cluster, ns: str, name: str = "train") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", ns, "-l", f"torchrun-job-name={name}")["items"]
    return items


def with_condition(cluster: Cluster, ns: str, ctype: str, reason: str) -> dict[str, Any] | None:
    obj = tj(cluster, ns)
    cond = condition(obj, ctype)
    return obj if cond and cond["reason"] == reason else None


def test_the_queues_placement_and_identity_reach_the_worker_pods(
    cluster: Cluster,
    namespace: str,
    start_controller: Callable[..., App],
    cluster_objects: list[tuple[str, ...]],
) -> None:
    """nodeSelector, affinity, tolerations, priorityClassName, imagePullSecrets and
    serviceAccountName of the queue are on the pods the Job controller created (gpuType is
    informational, SPEC §3: never a node selector, since real clusters label GPUs in their own
    words — it is set here to a value no node carries, and the job still runs), and
    the scheduler and admission acted on them: of the 4 nodes only gpu-node-3 satisfies the
    nodeSelector (zone-1: nodes 1 and 3) and the affinity (not gpu-node-1), and it carries a
    NoSchedule taint only the queue's toleration admits; the PriorityClass was resolved into
    spec.priority by the Priority admission plugin; the ServiceAccount admission plugin accepted
    the named ServiceAccount (it refuses a missing one)."""
    taint = f"torchrun.ai/test-dedicated={namespace}:NoSchedule"
    cluster.kubectl("taint", "node", "gpu-node-3", taint)
    cluster_objects.append(("taint", "node", "gpu-node-3", "torchrun.ai/test-dedicated-"))
    priority_class = f"uc-{namespace}"
    cluster.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": priority_class},
            "value": 1234,
        }
    )
    cluster_objects.append(("priorityclass", priority_class))
    cluster.kubectl("create", "serviceaccount", "trainer", "-n", namespace)
    cluster.kubectl("create", "secret", "generic", "registry", "-n", namespace, "--from-literal=k=v")
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-node-1"]}
                        ]
                    }
                ]
            }
        }
    }
    toleration = {
        "key": "torchrun.ai/test-dedicated",
        "operator": "Equal",
        "value": namespace,
        "effect": "NoSchedule",
    }
    queue = make_queue(
        cluster,
        cluster_objects,
        nodeResources={"gpus": 8, "cpus": "90", "memory": "900Gi", "gpuType": "h100-80gb"},
        imagePullSecrets=[{"name": "registry"}],
        serviceAccountName="trainer",
        scheduling={
            "nodeSelector": {"topology.kubernetes.io/zone": "zone-1"},
            "affinity": affinity,
            "tolerations": [toleration],
            "priorityClassName": priority_class,
        },
    )
    start_controller()
    make_job(cluster, namespace, queue, numNodes=1)
    running = wait_until(
        lambda: with_condition(cluster, namespace, "Running", "AllWorkersRunning"),
        60,
        message=f"Running; pods: {[p.get('status') for p in worker_pods(cluster, namespace)]}",
    )
    assert running["status"]["phase"] == "Running"

    (pod,) = worker_pods(cluster, namespace)
    spec = pod["spec"]
    assert spec["nodeName"] == "gpu-node-3"
    assert spec["nodeSelector"] == {"topology.kubernetes.io/zone": "zone-1"}  # gpuType is not one
    assert spec["affinity"] == affinity
    assert toleration in spec["tolerations"]
    assert (spec["priorityClassName"], spec["priority"]) == (priority_class, 1234)
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["serviceAccountName"] == "trainer"


def test_a_job_whose_pods_cannot_be_scheduled_quotes_the_scheduler(
    cluster: Cluster,
    namespace: str,
    start_controller: Callable[..., App],
    cluster_objects: list[tuple[str, ...]],
) -> None:
    """A nodeSelector no node has: the kube-scheduler marks the pods PodScheduled=False
    Unschedulable, and the job shows Running=False reason Unschedulable with that message
    (and a Warning Event), instead of waiting silently."""
    queue = make_queue(
        cluster, cluster_objects, scheduling={"nodeSelector": {"torchrun.ai/no-such-label": "x"}}
    )
    app = start_controller()
    make_job(cluster, namespace, queue)
    waiting = wait_until(
        lambda: with_condition(cluster, namespace, "Running", "Unschedulable"), 60, message="Unschedulable"
    )
    cond = condition(waiting, "Running")
    assert cond is not None and cond["status"] == "False"
    scheduler_says = {
        c["message"]
        for p in worker_pods(cluster, namespace)
        for c in p["status"].get("conditions", [])
        if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
    }
    assert scheduler_says, "the scheduler has not marked the pods (yet the job claims it did)"
    assert any(m in cond["message"] for m in scheduler_says), (cond["message"], scheduler_says)
    assert "didn't match Pod's node affinity/selector" in cond["message"]
    assert waiting["status"]["phase"] != "Running"

    def warned() -> bool:  # the recorder writes the Event in the background, maybe after the status
        app.recorder.flush()
        events = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=train")
        return any(e["reason"] == "Unschedulable" and e["type"] == "Warning" for e in events["items"])

    wait_until(warned, 10, message="the Unschedulable Warning Event")


def test_deleting_a_job_removes_its_job_service_and_pods(
    cluster: Cluster,
    namespace: str,
    start_controller: Callable[..., App],
    cluster_objects: list[tuple[str, ...]],
) -> None:
    """`kubectl delete tj` takes the worker Job, the Service and the pods with it, through owner
    references: the controller's own garbage collector is held off (--gc-interval 3600) and the
    audit log shows Kubernetes' garbage collector deleting the Job, the Service and the pods."""
    queue = make_queue(cluster, cluster_objects)
    start_controller("--gc-interval", "3600")
    make_job(cluster, namespace, queue)
    wait_until(
        lambda: with_condition(cluster, namespace, "Running", "AllWorkersRunning"), 60, message="Running"
    )
    uid = tj(cluster, namespace)["metadata"]["uid"]
    pods = [p["metadata"]["name"] for p in worker_pods(cluster, namespace)]
    assert len(pods) == 2
    for kind in ("job", "service"):
        refs = cluster.get(kind, "train", "-n", namespace)["metadata"]["ownerReferences"]
        assert [(r["kind"], r["uid"], r.get("controller")) for r in refs] == [("TorchrunJob", uid, True)]

    cluster.kubectl("delete", "torchrunjob", "train", "-n", namespace, "--timeout=60s")

    def gone(*args: str) -> bool:
        return not cluster.found(*args, "-n", namespace)

    wait_until(lambda: gone("job", "train"), 60, message="the worker Job deleted")
    wait_until(lambda: gone("service", "train"), 60, message="the Service deleted")
    wait_until(lambda: not worker_pods(cluster, namespace), 90, message="the pods deleted")
    audit.flush(cluster, namespace)
    for resource in ("jobs", "services"):
        deleters = {
            e["user"]["username"] for e in audit.requests_to(cluster, namespace, resource, "train", "delete")
        }
        assert deleters == {KUBE_GC}, (resource, deleters)
    for pod in pods:  # the garbage collector deletes them; kwok, acting as kubelet, then removes them
        deleters = {
            e["user"]["username"] for e in audit.requests_to(cluster, namespace, "pods", pod, "delete")
        }
        assert KUBE_GC in deleters, (pod, deleters)


def test_a_queue_naming_a_missing_storage_class_is_not_ready_and_its_jobs_wait(
    cluster: Cluster,
    namespace: str,
    start_controller: Callable[..., App],
    cluster_objects: list[tuple[str, ...]],
) -> None:
    """The queue's workspace names a StorageClass that does not exist: the queue is Ready=False
    StorageClassNotFound naming it, its job waits with Admitted=False QueueNotReady and nothing is
    created; once the StorageClass exists the queue turns Ready and the job starts by itself."""
    storage_class = f"uc-missing-{uuid.uuid4().hex[:6]}"
    queue = make_queue(cluster, cluster_objects, storage={"workspace": {"storageClassName": storage_class}})
    start_controller()
    make_job(cluster, namespace, queue)

    def queue_ready() -> dict[str, Any] | None:
        return condition(cluster.get("torchrunqueue", queue), "Ready")

    not_ready = wait_until(queue_ready, 30, message="the queue's Ready condition")
    assert (not_ready["status"], not_ready["reason"]) == ("False", "StorageClassNotFound")
    assert storage_class in not_ready["message"]
    waiting = wait_until(
        lambda: with_condition(cluster, namespace, "Admitted", "QueueNotReady"), 30, message="QueueNotReady"
    )
    admitted = condition(waiting, "Admitted")
    assert admitted is not None and admitted["status"] == "False" and queue in admitted["message"]
    assert waiting["status"]["phase"] == "Pending"
    assert not cluster.get("jobs", "-n", namespace)["items"], (
        "nothing is created for a job on a queue not Ready"
    )

    cluster.apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": storage_class},
            "provisioner": "kubernetes.io/no-provisioner",
        }
    )
    cluster_objects.insert(0, ("storageclass", storage_class))  # undone last: after the queue
    wait_until(lambda: (c := queue_ready()) and c["status"] == "True", 60, message="the queue Ready")
    wait_until(
        lambda: with_condition(cluster, namespace, "Running", "AllWorkersRunning"),
        60,
        message="the job running",
    )
