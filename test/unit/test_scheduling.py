"""Pure scheduler logic: what each scheduler gets on the worker Job, the PodGroups, the KAI Queue."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import Quantity, TorchrunJob, TorchrunQueue, resolve_topology
from controller.pods import unschedulable
from controller.torchrunjob.manifests.launch import parse_command
from controller.torchrunjob.manifests.podgroup import (
    build_pod_group,
    drift,
    min_member,
    workload_active_patch,
)
from controller.torchrunjob.manifests.scheduling import COSCHEDULING_SCHEDULER_NAME, creates_suspended
from controller.torchrunjob.manifests.worker import build_worker_job
from controller.torchrunqueue.kaiqueue import build_kai_queue, kai_number, kai_queue_patch


def queue(scheduler: str = "default", **spec: Any) -> TorchrunQueue:
    base: dict[str, Any] = {
        "nodeResources": {"gpus": 8, "cpus": "96", "memory": "1Ti"},
        "image": "img:1",
        "scheduling": {"scheduler": scheduler, **spec.pop("scheduling", {})},
    }
    base.update(spec)
    return TorchrunQueue.from_json({"metadata": {"name": "q", "uid": "q-uid"}, "spec": base})


def job(**spec: Any) -> TorchrunJob:
    base: dict[str, Any] = {"jobQueue": "q", "numNodes": 2, "command": "python train.py"}
    base.update(spec)
    return TorchrunJob.from_json({"metadata": {"name": "j", "namespace": "ns", "uid": "u-1"}, "spec": base})


def worker(j: TorchrunJob, q: TorchrunQueue) -> dict[str, Any]:
    topo = resolve_topology(j.spec, q.spec.node_resources)
    return build_worker_job(j, q, topo, parse_command(j.spec.command))


def pod_group(j: TorchrunJob, q: TorchrunQueue) -> tuple[str, dict[str, Any]]:
    built = build_pod_group(j, q, resolve_topology(j.spec, q.spec.node_resources))
    assert built is not None
    resource, manifest = built
    return resource.api_version, manifest


def test_default_scheduler_adds_nothing() -> None:
    m = worker(job(), queue())
    pod = m["spec"]["template"]
    assert "schedulerName" not in pod["spec"]
    assert not any(k.startswith(("kai.", "kueue.", "scheduling.")) for k in m["metadata"]["labels"])
    assert build_pod_group(job(), queue(), resolve_topology(job().spec, queue().spec.node_resources)) is None
    assert not creates_suspended(queue())


def test_kai_pods_join_the_controllers_pod_group_and_skip_kais_pod_grouper() -> None:
    q = queue("kai-scheduler", kaiQueue="team-a")
    m = worker(job(), q)
    pod = m["spec"]["template"]
    assert pod["spec"]["schedulerName"] == "kai-scheduler"
    assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    assert pod["metadata"]["annotations"]["pod-group-name"] == "j"
    assert pod["metadata"]["annotations"]["kai.scheduler/skip-podgrouper"] == "true"
    assert m["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    assert m["metadata"]["annotations"]["kai.scheduler/skip-podgrouper"] == "true"


def test_kai_pod_group_is_a_gang_of_every_node_in_the_queue() -> None:
    q = queue("kai-scheduler", kaiQueue="team-a", scheduling={"priorityClassName": "train"})
    api_version, pg = pod_group(job(numNodes=3), q)
    assert api_version == "scheduling.run.ai/v2alpha2" and pg["kind"] == "PodGroup"
    assert pg["metadata"]["name"] == "j" and pg["metadata"]["namespace"] == "ns"
    assert pg["spec"] == {"minMember": 3, "queue": "team-a", "priorityClassName": "train"}
    assert pg["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert pg["metadata"]["labels"]["torchrun-job-name"] == "j"
    assert pg["metadata"]["labels"]["torchrun.ai/role"] == "worker"


def test_gang_priority_follows_an_allowed_override_only() -> None:
    q = queue(
        "kai-scheduler", scheduling={"priorityClassName": "train"}, allowOverrides=["priorityClassName"]
    )
    _, pg = pod_group(job(overrides={"priorityClassName": "urgent"}), q)
    assert pg["spec"]["priorityClassName"] == "urgent"
    _, pg = pod_group(job(overrides={"priorityClassName": "urgent"}), queue("kai-scheduler"))
    assert "priorityClassName" not in pg["spec"]


def test_elastic_jobs_gang_on_their_minimum() -> None:
    j = job(numNodes=3, elastic={"minNodes": 2, "maxNodes": 4})
    q = queue("volcano")
    assert min_member(resolve_topology(j.spec, q.spec.node_resources)) == 2
    _, pg = pod_group(j, q)
    assert pg["spec"]["minMember"] == 2
    _, pg = pod_group(j, queue("coscheduling", nodeResources={"gpus": 4, "cpus": "500m"}))
    assert pg["spec"] == {"minMember": 2, "minResources": {"nvidia.com/gpu": "8", "cpu": "1"}}
    _, pg = pod_group(j, queue("coscheduling", nodeResources={"gpus": 0, "memory": "1.5Gi"}))
    assert pg["spec"]["minResources"] == {"memory": "3Gi"}  # a CPU-only queue asks for no GPU


def test_coscheduling_and_volcano_pod_groups_and_links() -> None:
    api_version, pg = pod_group(job(), queue("coscheduling", scheduling={"priorityClassName": "train"}))
    assert api_version == "scheduling.x-k8s.io/v1alpha1"
    # the gang's resources together (2 nodes of 8 GPUs, 96 CPUs, 1Ti); no priority field there
    gang = {"nvidia.com/gpu": "16", "cpu": "192", "memory": "2Ti"}
    assert pg["spec"] == {"minMember": 2, "minResources": gang}
    pod = worker(job(), queue("coscheduling"))["spec"]["template"]
    assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "j"
    assert pod["spec"]["schedulerName"] == COSCHEDULING_SCHEDULER_NAME == "scheduler-plugins-scheduler"

    api_version, pg = pod_group(job(), queue("volcano", scheduling={"priorityClassName": "train"}))
    assert api_version == "scheduling.volcano.sh/v1beta1"
    assert pg["spec"] == {"minMember": 2, "queue": "default", "priorityClassName": "train"}
    pod = worker(job(), queue("volcano"))["spec"]["template"]
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "j"


def test_kueue_labels_the_job_and_starts_it_suspended() -> None:
    q = queue("kueue", kueueLocalQueue="lq")
    m = worker(job(), q)
    assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "lq"
    assert creates_suspended(q)
    assert build_pod_group(job(), q, resolve_topology(job().spec, q.spec.node_resources)) is None
    assert worker(job(), queue("kueue"))["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"


def test_a_kueue_queues_topology_level_is_annotated_on_the_worker_pods() -> None:
    required = queue("kueue", kueueTopology={"required": "topology.kubernetes.io/zone"})
    annotations = worker(job(), required)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == "topology.kubernetes.io/zone"
    assert "kueue.x-k8s.io/podset-preferred-topology" not in annotations
    preferred = queue("kueue", kueueTopology={"preferred": "cloud.example.com/block"})
    annotations = worker(job(), preferred)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-preferred-topology"] == "cloud.example.com/block"
    assert "kueue.x-k8s.io/podset-required-topology" not in annotations
    plain = worker(job(), queue("kueue"))["spec"]["template"]["metadata"].get("annotations") or {}
    assert not any(k.startswith("kueue.x-k8s.io/podset-") for k in plain)


def test_a_kueue_queue_with_workload_slices_marks_elastic_jobs_and_gates_their_pods() -> None:
    sliced = queue("kueue", kueueWorkloadSlices=True)
    elastic = job(numNodes=1, elastic={"minNodes": 1, "maxNodes": 3})
    built = worker(elastic, sliced)
    assert built["metadata"]["annotations"]["kueue.x-k8s.io/elastic-job"] == "true"
    assert built["spec"]["template"]["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/elastic-job"}]
    assert (built["spec"]["parallelism"], built["spec"]["completions"]) == (1, 3)
    for rigid, q in ((job(), sliced), (elastic, queue("kueue"))):  # not elastic, or no slices
        built = worker(rigid, q)
        assert "kueue.x-k8s.io/elastic-job" not in built["metadata"]["annotations"]
        assert "schedulingGates" not in built["spec"]["template"]["spec"]


def test_pod_group_drift_patches_only_what_differs() -> None:
    _, desired = pod_group(job(), queue("kai-scheduler"))
    existing = {
        "metadata": {"labels": dict(desired["metadata"]["labels"]), "name": "j"},
        "spec": {**desired["spec"], "markUnschedulable": True},
        "status": {"phase": "Running"},
    }
    assert drift(existing, desired) == {}
    existing["spec"]["minMember"] = 1
    assert drift(existing, desired) == {"spec": {"minMember": 2}}


@pytest.mark.parametrize(
    ("active", "suspended", "patch"),
    [
        (None, False, None),
        (True, False, None),
        (None, True, {"spec": {"active": False}}),
        (False, True, None),
        (False, False, {"spec": {"active": True}}),
    ],
)
def test_kueue_workload_active_follows_suspend(
    active: bool | None, suspended: bool, patch: dict[str, Any] | None
) -> None:
    workload = {"spec": {} if active is None else {"active": active}}
    assert workload_active_patch(workload, suspended) == patch


def test_kai_units() -> None:
    assert kai_number("gpu", Quantity.parse("0.5")) == 0.5
    assert kai_number("gpu", Quantity.parse("16")) == 16
    assert kai_number("cpu", Quantity.parse("96")) == 96000
    assert kai_number("cpu", Quantity.parse("500m")) == 500
    assert kai_number("memory", Quantity.parse("512Gi")) == 549755.813888
    assert kai_number("memory", Quantity.parse("2G")) == 2000


def test_kai_queue_from_quota_with_explicit_unlimited() -> None:
    q = queue(
        "kai-scheduler",
        kaiQueue="team-a",
        parentKaiQueue="research",
        quota={"gpu": {"quota": "16", "limit": "32", "overQuotaWeight": 2}, "cpu": {"quota": "100"}},
    )
    kq = build_kai_queue(q)
    assert kq["apiVersion"] == "scheduling.run.ai/v2" and kq["kind"] == "Queue"
    assert kq["metadata"]["name"] == "team-a" and "namespace" not in kq["metadata"]
    assert kq["metadata"]["labels"] == {"torchrun.ai/queue": "q"}
    assert kq["metadata"]["ownerReferences"][0]["kind"] == "TorchrunQueue"
    assert kq["metadata"]["ownerReferences"][0]["uid"] == "q-uid"
    assert kq["spec"] == {
        "parentQueue": "research",
        "resources": {
            "gpu": {"quota": 16, "limit": 32, "overQuotaWeight": 2},
            "cpu": {"quota": 100000, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": 0, "limit": -1, "overQuotaWeight": 1},
        },
    }
    assert "parentQueue" not in build_kai_queue(queue("kai-scheduler"))["spec"]
    assert build_kai_queue(queue("kai-scheduler"))["metadata"]["name"] == "q"


def test_kai_queue_patch_keeps_admin_fields_and_removes_a_dropped_parent() -> None:
    desired = build_kai_queue(queue("kai-scheduler", quota={"gpu": {"quota": "8"}}))
    existing: dict[str, Any] = {
        "metadata": {"name": "q", "labels": {"torchrun.ai/queue": "q"}},
        "spec": {**desired["spec"], "priority": 200, "parentQueue": "old"},
    }
    assert kai_queue_patch(existing, desired) == {"spec": {"parentQueue": None}}
    existing["spec"]["parentQueue"] = None
    existing["spec"]["resources"] = {
        **desired["spec"]["resources"],
        "gpu": {"quota": 8.0, "limit": -1, "overQuotaWeight": 1},
    }
    assert kai_queue_patch(existing, desired) == {}
    existing["spec"]["resources"]["gpu"] = {"quota": 4, "limit": -1, "overQuotaWeight": 1}
    assert kai_queue_patch(existing, desired) == {
        "spec": {"resources": {"gpu": desired["spec"]["resources"]["gpu"]}}
    }


def test_a_gang_waiting_quotes_each_distinct_scheduler_message_once() -> None:
    def pod(name: str, message: str) -> dict[str, Any]:
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        return {"metadata": {"name": name}, "status": {"conditions": [cond]}}

    echo = "0/4 nodes are available: 4 optimistic rejection in PostFilter."
    why = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. PodGroup ns/j gets rejected"
    placed = {
        "metadata": {"name": "j-3"},
        "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]},
    }
    pods = [pod("j-2", echo), pod("j-4", why), placed, pod("j-0", echo)]
    assert unschedulable(pods) == f"pod j-0: {echo}; pod j-4: {why}"
    assert unschedulable([pod("j-1", why), pod("j-0", why)]) == f"pod j-0: {why}"
    assert unschedulable([placed]) is None
