"""Checkpoints on the control plane: rank 0's `prepare` report becomes `status.checkpoint` and a
`ResumedFromCheckpoint` Event; a resubmitted job on a persisted claim gets the checkpoint wiring.

kwok pods run no containers: kwok's pod-start stage marks every init container terminated with
exit code 0 and no message. Where a kubelet would put the `prepare` container's termination
message, the test writes one through the pods' status subresource, as kwok (or a kubelet) would,
with the sync program's own report type (`controller.checkpoint.report`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobs import make_job, queue_manifest
from testbed import Cluster, wait_until

from controller.checkpoint import CheckpointReport
from controller.cmd.main import App

INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def checkpoint_queue(cluster: Cluster) -> Iterator[str]:
    name = "cp-persist"
    storage = {"checkpoints": {"enabled": True, "persist": True, "keep": 2}}
    cluster.apply(queue_manifest(name, storage=storage, terminationGracePeriodSeconds=30))
    yield name
    cluster.kubectl("delete", "torchrunqueue", name, "--ignore-not-found", "--wait=false")


def running_pods(cluster: Cluster, ns: str, job: str) -> dict[str, dict[str, Any]] | None:
    """The worker pods of `job` by completion index, once each has its init containers' status."""
    items = cluster.get("pods", "-n", ns, "-l", f"torchrun-job-name={job},torchrun.ai/role=worker")["items"]
    ready = {
        p["metadata"]["annotations"][INDEX]: p
        for p in items
        if p["status"].get("phase") == "Running"
        and p["status"].get("initContainerStatuses")
        and not p["metadata"].get("deletionTimestamp")
    }
    return ready if len(ready) == 2 else None


def report_from_prepare(cluster: Cluster, ns: str, pod: dict[str, Any], report: CheckpointReport) -> None:
    """Give the pod's `prepare` init container the termination message `report` (status subresource)."""
    statuses = pod["status"]["initContainerStatuses"]
    for status in statuses:
        if status["name"] == "prepare":
            status["state"]["terminated"]["message"] = report.to_json()
    patch = json.dumps({"status": {"initContainerStatuses": statuses}})
    cluster.kubectl(
        "patch", "pod", pod["metadata"]["name"], "-n", ns, "--subresource=status", "--type=merge", "-p", patch
    )


def checkpoint_of(cluster: Cluster, ns: str, job: str) -> dict[str, Any] | None:
    status = cluster.get("torchrunjob", job, "-n", ns).get("status") or {}
    checkpoint: dict[str, Any] | None = status.get("checkpoint")
    return checkpoint


def resumed_events(cluster: Cluster, ns: str, job: str) -> list[str]:
    items = cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={job}")["items"]
    return sorted(e["message"] for e in items if e["reason"] == "ResumedFromCheckpoint")


def test_rank_0s_report_becomes_status_and_an_event_and_a_resubmission_gets_the_wiring(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App], checkpoint_queue: str
) -> None:
    start_controller()
    make_job(cluster, namespace, checkpoint_queue)
    pods = wait_until(lambda: running_pods(cluster, namespace, "train"), 60, message="workers running")
    spec = pods["0"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["initContainers"][0]["name"] == "prepare"  # first, before any sidecar
    assert checkpoint_of(cluster, namespace, "train") is None  # kwok's empty message is no report

    # rank 1 writes no report in a real pod; one here must still be ignored: only rank 0 counts
    other = CheckpointReport(root="/checkpoints", latest="/checkpoints/step-1", step=1, count=1)
    report_from_prepare(cluster, namespace, pods["1"], other)
    mine = CheckpointReport(
        root="/checkpoints",
        attempt=0,
        latest="/checkpoints/step-20",
        step=20,
        time="2026-11-25T09:00:00Z",
        count=2,
        resumed_from="/checkpoints/step-20",
        pruned=1,
    )
    report_from_prepare(cluster, namespace, pods["0"], mine)
    status = wait_until(
        lambda: checkpoint_of(cluster, namespace, "train"), 30, message="status.checkpoint from rank 0"
    )
    assert status == {
        "attempt": 0,
        "latest": "/checkpoints/step-20",
        "step": 20,
        "time": "2026-11-25T09:00:00Z",
        "count": 2,
        "resumedFrom": "/checkpoints/step-20",
        "pruned": 1,
        "mirrored": 0,
        "problems": [],
    }
    said = wait_until(lambda: resumed_events(cluster, namespace, "train"), 30, message="the Event")
    assert said == ["attempt 0 resumed from /checkpoints/step-20 (step 20); 2 complete checkpoint(s) kept"]

    # the same name again on the persisted claim: its workers choose from that claim at start
    cluster.kubectl("delete", "torchrunjob", "train", "-n", namespace, "--wait=true")
    wait_until(lambda: not cluster.get("jobs", "-n", namespace)["items"], 60, message="the worker Job gone")
    wait_until(
        lambda: not cluster.get("pods", "-n", namespace, "-l", "torchrun-job-name=train")["items"],
        60,
        message="the first job's pods gone (running_pods would take a terminating one)",
    )
    make_job(cluster, namespace, checkpoint_queue)
    pods = wait_until(lambda: running_pods(cluster, namespace, "train"), 60, message="resubmitted workers")
    spec = pods["0"]["spec"]
    prepare = spec["initContainers"][0]
    assert prepare["command"][3:] == [
        "prepare", "--target", "/opt/torchrun",
        "--checkpoints", "/checkpoints", "--attempt", "0", "--keep", "2",
    ]  # fmt: skip
    assert {"name": "checkpoints", "mountPath": "/checkpoints"} in prepare["volumeMounts"]
    claim = {v["name"]: v for v in spec["volumes"]}["checkpoints"]["persistentVolumeClaim"]
    assert claim == {"claimName": "train-checkpoints"}
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert (env["TORCHRUN_CHECKPOINT_DIR"], env["TORCHRUN_STOP_SIGNAL"]) == ("/checkpoints", "SIGTERM")
    assert checkpoint_of(cluster, namespace, "train") is None  # a new job: nothing reported yet
    later = CheckpointReport(root="/checkpoints", latest="/checkpoints/step-40", step=40, count=2,
                             resumed_from="/checkpoints/step-40")  # fmt: skip
    report_from_prepare(cluster, namespace, pods["0"], later)
    wait_until(
        lambda: (
            (checkpoint_of(cluster, namespace, "train") or {}).get("resumedFrom") == "/checkpoints/step-40"
        ),
        30,
        message="the resubmission's status.checkpoint",
    )
