"""Why workers do not start, said by the job on the real control plane (torchrunjob/starting.py).

kube-controller-manager's Job controller is refused by a real ResourceQuota and says so only in
its `FailedCreate` Events; the job's `Running` condition must quote it, and clear once room is
made. The kubelet's own words (image pulls, container config errors) are proven on the real node
(test/e2e/test_realnode.py), where a kubelet gives them; Kueue's in test_schedulers.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from jobs import make_job, queue_manifest
from testbed import Cluster, condition, wait_until

from controller.cmd.main import App
from controller.plugin.views import status_text


def quota(cluster: Cluster, ns: str, pods: int) -> None:
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "pods"},
            "spec": {"hard": {"pods": str(pods)}},
        },
        ns,
    )


def running(cluster: Cluster, ns: str, reason: str) -> dict[str, Any] | None:
    job = cluster.get("torchrunjob", "train", "-n", ns)
    return job if (condition(job, "Running") or {}).get("reason") == reason else None


def test_a_quota_that_refuses_a_worker_pod_is_quoted_and_clears_when_room_is_made(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    ns = namespace
    quota(cluster, ns, 1)
    wait_until(
        lambda: (cluster.get("resourcequota", "pods", "-n", ns).get("status") or {}).get("hard"),
        30,
        message="the quota controller saw the quota",
    )
    queue = "q-" + ns[-6:]
    cluster.apply(queue_manifest(queue, "run", "600s"))
    try:
        app = start_controller()
        make_job(cluster, ns, queue)  # two nodes: the second worker pod is over the quota
        job = wait_until(lambda: running(cluster, ns, "PodCreateFailed"), 90, message="PodCreateFailed")
        said = (condition(job, "Running") or {})["message"]
        assert said.startswith("job train: ") and "exceeded quota: pods" in said, said
        assert (condition(job, "Running") or {})["status"] == "False"
        assert job["status"]["phase"] == "Pending"
        page = status_text(job, [], [], datetime.now(timezone.utc))
        assert "Waiting:    Running=False PodCreateFailed: job train: " in page, page

        # a Warning Event on the TorchrunJob says it once
        # (the recorder writes it in the background: it may land after the status that says the same)
        def said_once() -> list[dict[str, Any]]:
            app.recorder.flush()
            events = cluster.get("events", "-n", ns, "--field-selector", "involvedObject.kind=TorchrunJob")
            return [e for e in events["items"] if e["reason"] == "PodCreateFailed"]

        events = wait_until(said_once, 10, message="the PodCreateFailed Event")
        assert [e["type"] for e in events] == ["Warning"], events

        quota(cluster, ns, 4)
        wait_until(lambda: running(cluster, ns, "AllWorkersRunning"), 120, message="AllWorkersRunning")
    finally:
        cluster.kubectl("delete", "torchrunqueue", queue, "--ignore-not-found", "--wait=false")
