"""Pure builders and status logic of the TorchrunJob controller."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

from jobspecs import env_of, job, queue, worker

from controller.api import (
    JobConditionType,
    JobPhase,
    TorchrunJobStatus,
    set_condition,
)
from controller.clock import utc_now
from controller.pods import unschedulable
from controller.torchrunjob import status as st
from controller.torchrunjob.manifests.service import build_service


def test_service_is_headless_and_owned() -> None:
    svc = build_service(job())
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["metadata"]["ownerReferences"][0] == {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunJob",
        "name": "j",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert svc["metadata"]["labels"] == {"torchrun-job-name": "j", "torchrun.ai/role": "worker"}


def test_worker_job_shape() -> None:
    m = worker(job(), queue(storage={"shmSizePerGPU": "4Gi"}))
    spec = m["spec"]
    assert (spec["completions"], spec["parallelism"], spec["completionMode"]) == (2, 2, "Indexed")
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "j"
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    c = pod["containers"][0]
    # the pod asks for nodeResources in all: the reporter sidecar's 10m and 48Mi come out of it
    share = {"nvidia.com/gpu": "8", "cpu": "95990m", "memory": "1048528Mi"}
    assert c["resources"] == {"requests": share, "limits": share}
    assert c["securityContext"]["runAsNonRoot"] is True
    env = env_of(m)
    assert env["WORLD_SIZE"] == "16" and env["PET_NPROC_PER_NODE"] == "8"
    assert env["PET_NODE_RANK"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
    }
    assert m["metadata"]["annotations"]["torchrun.ai/restart"] == "0"


def test_c10d_endpoint_is_node_0s_fully_qualified_name_in_the_cluster_domain() -> None:
    """torchrun hosts the c10d store only on the node whose canonical name (the kubelet's
    /etc/hosts: `<host>.<subdomain>.<ns>.svc.<domain>`) is the endpoint's host."""
    args = worker(job(), queue())["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--rdzv_endpoint=j-0.j.ns.svc.cluster.local:29400" in args
    m = worker(job(), queue(), cluster_domain="corp.example")
    assert (
        "--rdzv_endpoint=j-0.j.ns.svc.corp.example:29400"
        in m["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    env = env_of(m)
    assert (env["PET_RDZV_ENDPOINT"], env["MASTER_ADDR"]) == (
        "j-0.j.ns.svc.corp.example:29400",
        "j-0.j.ns.svc.corp.example",
    )


def test_num_gpus_that_fit_one_node_request_only_those() -> None:
    m = worker(job(numNodes=None, numGPUs=4), queue())
    c = m["spec"]["template"]["spec"]["containers"][0]
    assert m["spec"]["completions"] == 1
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert "--nproc_per_node=4" in c["args"] and "--nnodes=1" in c["args"]


def test_elastic_job_runs_min_to_max() -> None:
    m = worker(job(numNodes=2, elastic={"minNodes": 1, "maxNodes": 4}), queue())
    assert (m["spec"]["completions"], m["spec"]["parallelism"]) == (4, 2)
    assert "--nnodes=1:4" in m["spec"]["template"]["spec"]["containers"][0]["args"]


def test_failure_policy_maps_to_pod_failure_policy() -> None:
    m = worker(
        job(
            failurePolicy={"backoffLimitPerNode": 2, "permanentExitCodes": [2, 1], "retriableExitCodes": [75]}
        ),
        queue(),
    )
    spec = m["spec"]
    assert spec["backoffLimitPerIndex"] == 2 and spec["maxFailedIndexes"] == 0
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "Ignore" and rules[0]["onPodConditions"][0]["type"] == "DisruptionTarget"
    assert rules[1] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "torchrun", "operator": "In", "values": [1, 2]},
    }
    assert rules[2]["action"] == "Ignore" and rules[2]["onExitCodes"]["values"] == [75]


def test_overrides_apply_only_when_the_queue_allows_them() -> None:
    j = job(overrides={"image": "mine:2", "env": [{"name": "A", "value": "1"}], "nodeSelector": {"x": "y"}})
    closed = worker(j, queue(env=[{"name": "A", "value": "queue"}]))
    pod = closed["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "img:1" and env_of(closed)["A"] == "queue"
    assert "nodeSelector" not in pod
    opened = worker(
        j, queue(env=[{"name": "A", "value": "queue"}], allowOverrides=["image", "env", "nodeSelector"])
    )
    pod = opened["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "mine:2" and env_of(opened)["A"] == "1"
    assert pod["nodeSelector"] == {"x": "y"}


def test_command_env_and_etcd_rendezvous() -> None:
    j = job(
        command="WANDB_MODE=offline python -u -m pkg.train",
        distributed={"rdzvBackend": "etcd-v2", "rdzvEndpoint": "etcd.infra:2379"},
    )
    m = worker(j, queue())
    args = m["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--rdzv_backend=etcd-v2" in args and "--rdzv_endpoint=etcd.infra:2379" in args
    assert args[-2:] == ["-m", "pkg.train"]
    env = env_of(m)
    assert env["WANDB_MODE"] == "offline" and env["PYTHONUNBUFFERED"] == "1"
    assert env["PET_RDZV_ENDPOINT"] == "etcd.infra:2379"


def test_pod_labels_and_annotations_from_the_queue() -> None:
    m = worker(
        job(),
        queue(
            podLabels={"team": "nlp", "torchrun-job-name": "spoof"},
            podAnnotations={"sidecar.istio.io/inject": "false"},
        ),
    )
    meta = m["spec"]["template"]["metadata"]
    assert meta["labels"]["team"] == "nlp" and meta["labels"]["torchrun-job-name"] == "j"
    assert meta["annotations"] == {"sidecar.istio.io/inject": "false"}


def test_phase_follows_conditions_in_precedence_order() -> None:
    now = utc_now()
    conds = set_condition((), JobConditionType.RUNNING, True, "AllWorkersRunning", "", 1, now)
    assert st.phase_of(conds) == JobPhase.RUNNING
    conds = set_condition(conds, JobConditionType.SUSPENDED, True, "Suspended", "", 1, now)
    assert st.phase_of(conds) == JobPhase.SUSPENDED
    conds = set_condition(conds, JobConditionType.FAILED, True, "DeadlineExceeded", "", 1, now)
    assert st.phase_of(conds) == JobPhase.FAILED
    syncing = set_condition((), JobConditionType.WORKSPACE_READY, False, "Syncing", "", 1, now)
    assert st.phase_of(syncing) == JobPhase.SYNCING
    assert st.phase_of(()) == JobPhase.PENDING


def test_a_condition_set_twice_in_a_pass_keeps_its_time_when_it_ends_as_stored() -> None:
    """A name-conflict retry sets Admitted=True (admission), then False again, as stored: nothing
    changed, so nothing is written (a new lastTransitionTime on every retry was a write, whose
    watch event was one more pass)."""
    earlier, now = datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 2, tzinfo=timezone.utc)
    generation = job().metadata.generation
    stored = set_condition((), JobConditionType.ADMITTED, False, "NameConflict", "taken", generation, earlier)
    waiting = dataclasses.replace(job(), status=TorchrunJobStatus(conditions=stored))
    s = st.StatusUpdate(waiting, now)
    s.cond(JobConditionType.ADMITTED, True, "Admitted", "fits")
    assert s.status.conditions[0].last_transition_time == now  # a flip within the pass so far
    s.cond(JobConditionType.ADMITTED, False, "NameConflict", "taken")
    assert s.status.conditions == stored
    # one that really flips moves
    s = st.StatusUpdate(waiting, now)
    s.cond(JobConditionType.ADMITTED, True, "Admitted", "fits")
    assert s.status.conditions[0].last_transition_time == now


def test_worker_outcome_and_unschedulable_reason() -> None:
    failed = {
        "status": {
            "conditions": [
                {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "exit 2"}
            ]
        }
    }
    outcome = st.worker_outcome(failed)
    assert outcome is not None and outcome.permanent and not outcome.succeeded
    backoff = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedIndexes"}]}}
    assert st.worker_outcome(backoff) is not None and not st.worker_outcome(backoff).permanent  # type: ignore[union-attr]
    done = {
        "status": {
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "reason": "SuccessPolicy"}]
        }
    }
    assert st.worker_outcome(done) == st.Outcome(True, "SuccessPolicy", "")
    assert st.worker_outcome({"status": {"active": 2}}) is None
    pods = [
        {
            "metadata": {"name": "j-0"},
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/4 nodes",
                    }
                ]
            },
        }
    ]
    assert unschedulable(pods) == "pod j-0: 0/4 nodes"
    assert st.worker_counts({"status": {"active": 2, "ready": 1}}).ready == 1


def test_retriable_failures_count_only_this_jobs_failed_pods_with_those_codes() -> None:
    def pod(uid: str, phase: str, code: int, container: str = "torchrun") -> dict[str, Any]:
        state = {"terminated": {"exitCode": code}}
        return {
            "metadata": {"name": f"p-{uid}-{code}", "ownerReferences": [{"uid": uid, "controller": True}]},
            "status": {"phase": phase, "containerStatuses": [{"name": container, "state": state}]},
        }

    pods = [
        pod("w1", "Failed", 75),
        pod("w1", "Failed", 75),
        pod("w1", "Failed", 1),  # not a retriable code
        pod("w1", "Failed", 75, container="sidecar"),
        pod("w1", "Running", 75),
        pod("w0", "Failed", 75),  # the previous attempt's Job
    ]
    assert st.retriable_failures(pods, "w1", {75}) == 2
    assert st.retriable_failures(pods, "w1", ()) == 0


def test_a_cpu_only_queue_runs_a_process_per_cpu_and_requests_no_gpu() -> None:
    for cpus, procs in (("4", 4), ("2500m", 2), ("500m", 1), (None, 1)):
        node: dict[str, Any] = {"gpus": 0, "memory": "16Gi", **({"cpus": cpus} if cpus else {})}
        m = worker(job(numNodes=3, distributed={"backend": "gloo"}), queue(nodeResources=node))
        c = m["spec"]["template"]["spec"]["containers"][0]
        assert f"--nproc_per_node={procs}" in c["args"], cpus
        assert env_of(m)["WORLD_SIZE"] == str(3 * procs) and env_of(m)["PET_NPROC_PER_NODE"] == str(procs)
        assert "nvidia.com/gpu" not in c["resources"]["limits"]
        shm = next(v for v in m["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["sizeLimit"] == "2Gi"  # a CPU-only node counts as one GPU


def test_the_seeds_gpu_counts_become_whole_nodes() -> None:
    """numGPUs 16 and 32 on the seed's 8-GPU queues (its README examples)."""
    for gpus, nodes in ((16, 2), (32, 4)):
        m = worker(job(numNodes=None, numGPUs=gpus), queue())
        assert m["spec"]["completions"] == nodes and env_of(m)["WORLD_SIZE"] == str(gpus)


def test_etcd_v2_without_an_endpoint_points_the_workers_at_the_managed_etcd() -> None:
    m = worker(job(distributed={"rdzvBackend": "etcd-v2"}), queue())
    args = m["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--rdzv_backend=etcd-v2" in args and "--rdzv_endpoint=j-etcd:2379" in args
    assert env_of(m)["PET_RDZV_ENDPOINT"] == "j-etcd:2379"


def test_gpu_type_is_informational_never_a_node_selector() -> None:
    """SPEC §3: real clusters label GPUs in their own words (NVIDIA-H100-80GB-HBM3), so a
    selector made from `gpuType` would keep every job Pending; placement is `nodeSelector`."""
    q = queue(
        nodeResources={"gpus": 8, "gpuType": "h100-80gb"},
        scheduling={"nodeSelector": {"gpu.nvidia.com/class": "H100"}},
    )
    pod = worker(job(), q)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu.nvidia.com/class": "H100"}
    assert (
        "nodeSelector"
        not in worker(job(), queue(nodeResources={"gpus": 8, "gpuType": "a100"}))["spec"]["template"]["spec"]
    )
