"""The TorchrunJob controller on the real control plane; kwok decides how pods end."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import audit
from jobs import make_job, queue_manifest, queue_ready, rest_requests
from prometheus_client import generate_latest
from testbed import Cluster, condition, wait_until

from controller.cmd.main import App


def make_queue(cluster: Cluster, outcome: str = "succeed", duration: str = "3s", **spec: Any) -> str:
    name = f"q-{uuid.uuid4().hex[:6]}"
    body = queue_manifest(name, outcome, duration, **spec)
    cluster.apply(body)
    return name


def tj(cluster: Cluster, ns: str, name: str = "train") -> dict[str, Any]:
    return cluster.get("torchrunjob", name, "-n", ns)


def phase_is(cluster: Cluster, ns: str, phase: str, name: str = "train") -> dict[str, Any] | None:
    obj = tj(cluster, ns, name)
    return obj if (obj.get("status") or {}).get("phase") == phase else None


def passes(app: App, result: str) -> float:
    """Finished passes of the TorchrunJob controller with this result (success, requeue, ...)."""
    return sum(
        s.value
        for metric in app.metrics.reconcile_total.collect()
        for s in metric.samples
        if s.name.endswith("_total") and s.labels == {"controller": "torchrunjob", "result": result}
    )


def pod_uids(cluster: Cluster, ns: str) -> set[str]:
    return {p["metadata"]["uid"] for p in cluster.get("pods", "-n", ns)["items"]}


def events_of(cluster: Cluster, ns: str, name: str = "train") -> list[str]:
    items = cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")["items"]
    return [e["reason"] for e in items]


def test_two_node_job_runs_to_success(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    """The workers run until the test ends them, so `Running` is a state the job stays in while
    it is checked, not a window a poll can miss."""
    queue = make_queue(cluster, outcome="run")
    app = start_controller()
    # the job comes once its queue is Ready: else it is rightly held back first (QueueNotReady),
    # which a loaded machine made happen once, and the Admitted Event below follows
    wait_until(
        lambda: (condition(cluster.get("torchrunqueue", queue), "Ready") or {}).get("status") == "True",
        30,
        message="the queue Ready",
    )
    make_job(cluster, namespace, queue)
    running = wait_until(lambda: phase_is(cluster, namespace, "Running"), 60, message="Running")
    assert condition(running, "Admitted")["status"] == "True"
    assert condition(running, "Running")["reason"] == "AllWorkersRunning"
    assert running["status"]["nodes"] == 2 and running["status"]["gpus"] == 16

    uid = running["metadata"]["uid"]
    svc = cluster.get("service", "train", "-n", namespace)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {"torchrun-job-name": "train", "torchrun.ai/role": "worker"}
    assert svc["metadata"]["ownerReferences"][0]["uid"] == uid

    job = cluster.get("job", "train", "-n", namespace, "--show-managed-fields")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert spec["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == "DisruptionTarget"
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "train" and pod["restartPolicy"] == "Never"
    c = pod["containers"][0]
    assert c["command"] == ["/bin/sh", "/opt/torchrun/launch", "torchrun"]
    assert c["args"] == [
        "--nnodes=2",
        "--nproc_per_node=8",
        "--node_rank=$(PET_NODE_RANK)",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=train-0.train.{namespace}.svc.cluster.local:29400",
        f"--rdzv_id={uid}",
        "--max_restarts=0",
        "train.py",
        "--epochs",
        "1",
    ]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (
        env["WORLD_SIZE"] == "16"
        and env["MASTER_ADDR"] == f"train-0.train.{namespace}.svc.cluster.local"
        and env["PET_NNODES"] == "2"
    )
    # the pod asks for nodeResources in all: the reporter sidecar's 10m and 48Mi come out of it
    share = {"nvidia.com/gpu": "8", "cpu": "89990m", "memory": "921552Mi"}
    assert c["resources"] == {"requests": share, "limits": share}
    assert {v["name"]: v for v in pod["volumes"]}["dshm"]["emptyDir"]["medium"] == "Memory"
    assert job["metadata"]["labels"]["torchrun.ai/role"] == "worker"
    assert any(m["manager"] == "torchrun-controller" for m in job["metadata"]["managedFields"])

    pods = cluster.get("pods", "-n", namespace, "-l", "torchrun-job-name=train")["items"]
    assert len({p["spec"]["nodeName"] for p in pods}) == 2
    assert {p["spec"]["hostname"] for p in pods} == {"train-0", "train-1"}
    assert {p["status"]["phase"] for p in pods} == {"Running"}

    # the test ends the workers: kwok's pod-succeed stage takes a Running pod with this outcome
    workers = "torchrun-job-name=train,torchrun.ai/role=worker"
    ending = ("kwok.torchrun.ai/outcome=succeed", "kwok.torchrun.ai/duration=0s")
    cluster.kubectl("annotate", "pods", "-n", namespace, "-l", workers, *ending, "--overwrite")
    done = wait_until(lambda: phase_is(cluster, namespace, "Succeeded"), 60, message="Succeeded")
    assert condition(done, "Succeeded")["status"] == "True"
    assert done["status"]["completionTime"] and done["status"]["startTime"]
    assert done["status"]["observedGeneration"] == done["metadata"]["generation"]
    app.recorder.flush()
    reasons = wait_until(
        lambda: (r := events_of(cluster, namespace)) and "Succeeded" in r and r, 10, message="events"
    )
    assert {"AllWorkersRunning", "Succeeded"} <= set(reasons)
    assert "Admitted" not in reasons  # admitted on first sight: the condition says it, no Event
    # the gauge counts the controller's cache, which gets the Succeeded status one watch event
    # after the API server has it (what the test read above): it follows within that event
    succeeded = f'torchrun_jobs{{phase="Succeeded",queue="{queue}"}} 1.0'

    def scrape() -> str | None:
        text = generate_latest(app.metrics.registry).decode()
        return text if succeeded in text else None

    scraped = wait_until(scrape, 10, message=succeeded)
    assert "torchrun_job_submit_to_running_seconds_count 1.0" in scraped


def test_retriable_failure_restarts_until_cap(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    queue = make_queue(
        cluster, outcome="fail", duration="1s", annotations={"kwok.torchrun.ai/exit-code": "1"}
    )
    start_controller()
    make_job(cluster, namespace, queue, failurePolicy={"maxRestarts": 2})
    failed = wait_until(lambda: phase_is(cluster, namespace, "Failed"), 120, message="Failed after restarts")
    assert failed["status"]["restarts"] == 2
    assert condition(failed, "Failed")["reason"] == "RestartLimitExceeded"


def test_a_pod_that_always_exits_with_a_retriable_code_is_bounded(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    """podFailurePolicy's Ignore rule alone would recreate the pod forever, uncounted; the cap ends
    each attempt after maxRetriableFailures, the whole-job restart budget then ends the job."""
    queue = make_queue(
        cluster, outcome="fail", duration="1s", annotations={"kwok.torchrun.ai/exit-code": "75"}
    )
    app = start_controller()
    # the smallest budget that shows both bounds: kube-controller-manager recreates each failed pod
    # after its pod backoff (10 s, then 20 s), so every retriable failure allowed costs that much
    policy = {"retriableExitCodes": [75], "maxRetriableFailures": 1, "maxRestarts": 1}
    make_job(cluster, namespace, queue, numNodes=1, failurePolicy=policy)
    failed = wait_until(lambda: phase_is(cluster, namespace, "Failed"), 180, message="Failed at the cap")
    status = failed["status"]
    assert status["restarts"] == 1
    assert status["retriableFailures"] == 2  # the second failure of the second attempt passed the cap
    cond = condition(failed, "Failed")
    assert cond["reason"] == "RestartLimitExceeded" and "RetriableFailureLimitExceeded" in cond["message"]
    # the loop really stopped: the worker Job is gone and no pod is made afterwards. The window is
    # three periods of the loop as this run measured it (4 pods, 2 per attempt, from the job's
    # creation to its failure; kwok fails each 1 s after it starts): a live loop shows >= 2 new pods
    wait_until(lambda: not cluster.get("jobs", "-n", namespace)["items"], 30, message="worker Job deleted")
    created = datetime.fromisoformat(failed["metadata"]["creationTimestamp"])
    ended = datetime.fromisoformat(cond["lastTransitionTime"])
    period = (ended - created).total_seconds() / (2 * (status["restarts"] + 1))
    window = max(3 * period, 3.0)  # timestamps have whole seconds
    before = pod_uids(cluster, namespace)
    time.sleep(window)
    assert pod_uids(cluster, namespace) <= before, f"a pod appeared within {window:.1f} s"
    assert not cluster.get("jobs", "-n", namespace)["items"]
    app.recorder.flush()
    assert "RetriableFailure" in events_of(cluster, namespace)


def test_restart_limit_flag_caps_restarts(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    queue = make_queue(cluster, outcome="fail", duration="1s")
    start_controller("--restart-limit", "1")
    make_job(cluster, namespace, queue, failurePolicy={"maxRestarts": 5})
    failed = wait_until(lambda: phase_is(cluster, namespace, "Failed"), 120, message="Failed")
    assert failed["status"]["restarts"] == 1


def test_permanent_exit_code_fails_at_once(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    queue = make_queue(
        cluster, outcome="fail", duration="1s", annotations={"kwok.torchrun.ai/exit-code": "2"}
    )
    start_controller()
    make_job(cluster, namespace, queue, failurePolicy={"maxRestarts": 3, "permanentExitCodes": [2]})
    failed = wait_until(lambda: phase_is(cluster, namespace, "Failed"), 60, message="Failed")
    assert failed["status"]["restarts"] == 0
    assert condition(failed, "Failed")["reason"] == "PermanentFailure"


def test_suspend_and_resume(cluster: Cluster, namespace: str, start_controller: Callable[..., App]) -> None:
    queue = make_queue(cluster, outcome="run")
    start_controller()
    make_job(cluster, namespace, queue)
    wait_until(lambda: phase_is(cluster, namespace, "Running"), 60, message="Running")
    cluster.kubectl(
        "patch", "torchrunjob", "train", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    suspended = wait_until(lambda: phase_is(cluster, namespace, "Suspended"), 60, message="Suspended")
    assert condition(suspended, "Suspended")["status"] == "True"
    wait_until(
        lambda: not cluster.get("pods", "-n", namespace, "-l", "torchrun-job-name=train")["items"],
        60,
        message="pods gone while suspended",
    )
    assert cluster.get("job", "train", "-n", namespace)["spec"]["suspend"] is True
    cluster.kubectl(
        "patch", "torchrunjob", "train", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}'
    )
    resumed = wait_until(lambda: phase_is(cluster, namespace, "Running"), 60, message="Running again")
    assert condition(resumed, "Suspended")["status"] == "False"


# Both timers are checked against the job's own status timestamps. Those are written with 1 s
# resolution, truncated: the controller's exact moment lies in [t, t + 1 s). The moment the
# controller acted is the API server's (the audit log's requestReceivedTimestamp, microseconds),
# so the test's own polling can neither hide an early action nor make a timely one look late.
TIMESTAMP_RESOLUTION = 1.0
# after the exact moment: the delayed requeue firing, the reconcile, the request reaching the
# server, on a 2-core machine shared with other test sessions
TIMER_TOLERANCE = 2.0


def status_time(obj: dict[str, Any], field: str) -> datetime:
    return datetime.fromisoformat(obj["status"][field].replace("Z", "+00:00"))


def controller_requests(cluster: Cluster, ns: str, resource: str, verb: str) -> list[dict[str, Any]]:
    """The controller's `verb` requests on `<resource>/train` in `ns`, oldest first."""
    audit.flush(cluster, ns)
    found = audit.requests_to(cluster, ns, resource, "train", verb)
    return [e for e in found if e.get("userAgent", "").startswith("torchrun-controller")]


def test_ttl_deletes_the_job_on_time(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    """ttlSecondsAfterFinished=5: the controller's DELETE of the TorchrunJob reaches the API server
    no earlier than status.completionTime + 5 s (an early delete fails) and no later than
    completionTime + 5 s + TIMESTAMP_RESOLUTION + TIMER_TOLERANCE."""
    ttl = 5
    queue = make_queue(cluster, duration="1s")
    start_controller()
    make_job(cluster, namespace, queue, ttlSecondsAfterFinished=ttl)
    done = wait_until(lambda: phase_is(cluster, namespace, "Succeeded"), 60, message="Succeeded")
    completed = status_time(done, "completionTime")
    wait_until(
        lambda: not cluster.found("torchrunjob", "train", "-n", namespace),
        ttl + 30,
        interval=0.1,
        message="deleted by TTL",
    )
    deletes = controller_requests(cluster, namespace, "torchrunjobs", "delete")
    assert deletes, "the TorchrunJob is gone but the controller never sent its DELETE"
    first = (audit.received(deletes[0]) - completed).total_seconds()
    assert first >= ttl, f"deleted {first:.3f}s after status.completionTime: before the TTL of {ttl}s"
    succeeded = [e for e in deletes if e["responseStatus"]["code"] < 300]
    assert len(succeeded) == 1, [
        (e["responseStatus"]["code"], e["requestReceivedTimestamp"]) for e in deletes
    ]
    late = (audit.received(succeeded[0]) - completed).total_seconds()
    assert late <= ttl + TIMESTAMP_RESOLUTION + TIMER_TOLERANCE, (
        f"deleted {late:.3f}s after status.completionTime, TTL {ttl}s"
    )


def test_active_deadline_fails_with_deadline_exceeded(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    """activeDeadlineSeconds=4, counted from status.startTime: the controller stops the workers (its
    DELETE of the worker Job reaches the API server) and records status.completionTime no earlier
    than startTime + 4 s and no later than startTime + 4 s + TIMESTAMP_RESOLUTION +
    TIMER_TOLERANCE; the job fails with reason DeadlineExceeded."""
    deadline = 4
    queue = make_queue(cluster, outcome="run")
    start_controller()
    make_job(cluster, namespace, queue, activeDeadlineSeconds=deadline)
    failed = wait_until(
        lambda: phase_is(cluster, namespace, "Failed"), deadline + 30, message="Failed by deadline"
    )
    assert condition(failed, "Failed")["reason"] == "DeadlineExceeded"
    started = status_time(failed, "startTime")
    upper = deadline + TIMESTAMP_RESOLUTION + TIMER_TOLERANCE
    # both timestamps are truncated to the second: their difference is exact to within a second
    recorded = (status_time(failed, "completionTime") - started).total_seconds()
    assert deadline <= recorded <= upper, f"completionTime is startTime + {recorded}s"
    wait_until(lambda: not cluster.get("jobs", "-n", namespace)["items"], 30, message="workers removed")
    deletes = controller_requests(cluster, namespace, "jobs", "delete")
    assert deletes, "the worker Job is gone but the controller never sent its DELETE"
    stopped = (audit.received(deletes[0]) - started).total_seconds()
    assert deadline <= stopped <= upper, f"workers stopped {stopped:.3f}s after status.startTime"


def test_missing_queue_waits_then_starts(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    start_controller()
    qname = f"q-{uuid.uuid4().hex[:6]}"
    make_job(cluster, namespace, qname)
    waiting = wait_until(
        lambda: (o := tj(cluster, namespace)) and condition(o, "Admitted") and o,
        30,
        message="Admitted condition",
    )
    cond = condition(waiting, "Admitted")
    assert (cond["status"], cond["reason"]) == ("False", "QueueNotFound")
    assert qname in cond["message"]
    assert waiting["status"]["phase"] == "Pending"
    assert not cluster.get("jobs", "-n", namespace)["items"], "nothing is created before the queue exists"
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": {"name": qname},
            "spec": {
                "nodeResources": {"gpus": 8},
                "image": "pytorch/pytorch:2.4.0",
                "podAnnotations": {"kwok.torchrun.ai/outcome": "run"},
            },
        }
    )
    wait_until(lambda: phase_is(cluster, namespace, "Running"), 60, message="Running once the queue exists")


def test_invalid_num_gpus_does_not_block_others(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    queue = make_queue(cluster, outcome="run")
    start_controller()
    queue_ready(cluster, queue)
    make_job(cluster, namespace, queue, name="bad", numGPUs=12)
    make_job(cluster, namespace, queue, name="good")
    # seen first beside the queue as the controller's cache had it, the job may wait a pass as
    # QueueNotReady ("not Ready yet") before it is judged against the queue
    bad = wait_until(
        lambda: (
            (o := tj(cluster, namespace, "bad"))
            and (condition(o, "Admitted") or {}).get("reason") not in (None, "QueueNotReady")
            and o
        ),
        30,
        message="bad job condition",
    )
    cond = condition(bad, "Admitted")
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert "spec.numGPUs" in cond["message"] and "12" in cond["message"]
    wait_until(lambda: phase_is(cluster, namespace, "Running", "good"), 60, message="good job runs")
    assert cluster.kubectl("get", "job", "bad", "-n", namespace, check=False).returncode != 0

    # managedEtcd: true is the explicit spelling of etcd-v2 without an endpoint: admitted, and the
    # job's etcd is made (its whole lifecycle: test_etcd_v2_without_an_endpoint_gets_a_managed_etcd)
    make_job(
        cluster, namespace, queue, name="etcd", distributed={"rdzvBackend": "etcd-v2", "managedEtcd": True}
    )
    etcd = wait_until(
        lambda: (o := tj(cluster, namespace, "etcd")) and condition(o, "Admitted") and o,
        30,
        message="managed etcd condition",
    )
    assert condition(etcd, "Admitted")["status"] == "True"
    wait_until(lambda: phase_is(cluster, namespace, "Running", "etcd"), 60, message="the etcd-v2 job runs")
    etcd_pod = cluster.get("pod", "etcd-etcd", "-n", namespace)
    assert etcd_pod["metadata"]["ownerReferences"][0]["uid"] == etcd["metadata"]["uid"]


def fill_every_node(cluster: Cluster, ns: str) -> list[str]:
    """One pod bound to each fake node asking for all its CPUs, so nothing else fits anywhere
    (kwok runs them); returns their names."""
    names = []
    for node in cluster.get("nodes")["items"]:
        if (node["metadata"].get("annotations") or {}).get("kwok.x-k8s.io/node") != "fake":
            continue
        name = f"filler-{node['metadata']['name']}"
        cpu = node["status"]["allocatable"]["cpu"]
        container = {"name": "c", "image": "filler", "resources": {"requests": {"cpu": cpu}}}
        body = {"nodeName": node["metadata"]["name"], "containers": [container]}
        cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}, ns)
        names.append(name)
    return names


def test_etcd_v2_without_an_endpoint_gets_a_managed_etcd(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    """The seed's `rdzvBackend: etcd-v2` with no endpoint: the job's etcd (pod + Service
    `<job>-etcd`, owned by the job) exists before any worker, the workers are created only once it
    is Ready and are pointed at it, and it goes with the job. Every node is full at first, so the
    etcd pod waits unscheduled (quoted in the job's status) and the worker Job must not exist."""
    queue = make_queue(cluster, outcome="run")
    fillers = fill_every_node(cluster, namespace)
    start_controller()
    make_job(cluster, namespace, queue, name="rdzv", distributed={"rdzvBackend": "etcd-v2"})
    waiting = wait_until(
        lambda: (
            (o := tj(cluster, namespace, "rdzv"))
            and (c := condition(o, "Running"))
            and c["reason"] == "Unschedulable"
            and o
        ),
        60,
        message="the etcd pod waiting to be scheduled",
    )
    assert condition(waiting, "Running")["message"].startswith("etcd pod rdzv-etcd: ")
    assert cluster.kubectl("get", "job", "rdzv", "-n", namespace, check=False).returncode != 0
    uid = waiting["metadata"]["uid"]
    pod = cluster.get("pod", "rdzv-etcd", "-n", namespace)
    svc = cluster.get("service", "rdzv-etcd", "-n", namespace)
    for obj in (pod, svc):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("TorchrunJob", uid, True)
        assert obj["metadata"]["labels"] == {"torchrun-job-name": "rdzv", "torchrun.ai/role": "etcd"}
    (c,) = pod["spec"]["containers"]
    assert c["image"].startswith("gcr.io/etcd-development/etcd:v3.5.") and "--enable-v2=true" in c["args"]
    assert c["resources"]["limits"] and c["resources"]["requests"]["cpu"] == "100m"
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(2379, "client")]
    assert svc["spec"]["selector"] == {"torchrun-job-name": "rdzv", "torchrun.ai/role": "etcd"}

    cluster.kubectl("delete", "pod", *fillers, "-n", namespace, "--wait=false")
    running = wait_until(lambda: phase_is(cluster, namespace, "Running", "rdzv"), 90, message="Running")
    ready = condition(cluster.get("pod", "rdzv-etcd", "-n", namespace), "Ready") or {}
    assert ready.get("status") == "True", ready
    ready_at = ready["lastTransitionTime"]
    worker_job = cluster.get("job", "rdzv", "-n", namespace)
    assert worker_job["metadata"]["creationTimestamp"] >= ready_at  # RFC 3339 UTC: ordered as text
    args = worker_job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--rdzv_backend=etcd-v2" in args and "--rdzv_endpoint=rdzv-etcd:2379" in args
    assert condition(running, "Running")["reason"] == "AllWorkersRunning"

    cluster.kubectl("delete", "torchrunjob", "rdzv", "-n", namespace)
    wait_until(
        lambda: not cluster.get("pods,services", "-n", namespace, "-l", "torchrun.ai/role=etcd")["items"],
        60,
        message="the managed etcd deleted with the job",
    )


def test_each_whole_job_restart_gets_a_fresh_etcd(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    """torchrun closes its rendezvous when an attempt ends and the next attempt reuses the run id,
    so a restart replaces the managed etcd before the new workers start; a finished job's etcd pod
    goes (nothing rendezvous any more), its Service stays until the job does."""
    queue = make_queue(
        cluster, outcome="fail", duration="2s", annotations={"kwok.torchrun.ai/exit-code": "1"}
    )
    start_controller()
    make_job(
        cluster, namespace, queue, distributed={"rdzvBackend": "etcd-v2"}, failurePolicy={"maxRestarts": 1}
    )
    first = wait_until(
        lambda: (p := cluster.get("pods", "-n", namespace, "-l", "torchrun.ai/role=etcd")["items"]) and p[0],
        60,
        message="the first etcd pod",
    )
    assert first["metadata"]["annotations"]["torchrun.ai/restart"] == "0"

    def second_etcd() -> dict[str, Any] | None:
        pods = cluster.get("pods", "-n", namespace, "-l", "torchrun.ai/role=etcd")["items"]
        return next((p for p in pods if p["metadata"]["uid"] != first["metadata"]["uid"]), None)

    second = wait_until(second_etcd, 90, message="a new etcd pod for restart 1")
    assert second["metadata"]["annotations"]["torchrun.ai/restart"] == "1"
    failed = wait_until(lambda: phase_is(cluster, namespace, "Failed"), 120, message="Failed after 1 restart")
    assert failed["status"]["restarts"] == 1
    wait_until(
        lambda: not cluster.get("pods", "-n", namespace, "-l", "torchrun.ai/role=etcd")["items"],
        60,
        message="the finished job's etcd pod removed",
    )
    assert (
        cluster.get("service", "train-etcd", "-n", namespace)["metadata"]["labels"]["torchrun.ai/role"]
        == "etcd"
    )


def test_autoclean_removes_pods_and_service_and_keeps_the_job(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    queue = make_queue(cluster, duration="1s")
    start_controller("--autoclean")
    make_job(cluster, namespace, queue)
    wait_until(lambda: phase_is(cluster, namespace, "Succeeded"), 60, message="Succeeded")
    wait_until(
        lambda: not cluster.get("pods", "-n", namespace, "-l", "torchrun-job-name=train")["items"],
        60,
        message="pods removed by --autoclean",
    )
    assert tj(cluster, namespace)["status"]["phase"] == "Succeeded"
    wait_until(
        lambda: not cluster.found("service", "train", "-n", namespace),
        30,
        message="Service removed by --autoclean",
    )


def test_a_name_taken_by_a_foreign_service_waits_without_hot_looping_then_starts(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    # a user's Service that happens to have the job's name and even our (unprefixed) label key
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "train", "labels": {"torchrun-job-name": "train", "team": "theirs"}},
        "spec": {"clusterIP": "None", "ports": [{"port": 8080}]},
    }
    cluster.apply(foreign, namespace)
    before = cluster.get("service", "train", "-n", namespace)["metadata"]
    queue = make_queue(cluster, outcome="run")
    app = start_controller()
    make_job(cluster, namespace, queue)
    waiting = wait_until(
        lambda: (c := condition(tj(cluster, namespace), "Admitted")) and c["reason"] == "NameConflict" and c,
        30,
        message="Admitted=False NameConflict",
    )
    assert waiting["status"] == "False"
    assert f"Service {namespace}/train" in waiting["message"] and "delete or rename it" in waiting["message"]
    assert tj(cluster, namespace)["status"]["phase"] == "Pending"
    # Retries back off (client-go's per-item exponential limiter), they do not loop. A window of
    # 30 s in two halves: a conflict is retried 5 ms * (2**n - 1) after the first pass (n = 1, 2,
    # ...), so 12 retries fall in the first 20.5 s and the 13th at 41 s; whenever the window starts
    # (once the condition is seen, within the first seconds), it holds <= 13 retries, the second
    # half <= 1 (2 allowed: the pass that wrote the condition may land there), while any fixed
    # retry interval under 5 s would give >= 3 in each half. The cache holds the foreign Service,
    # so retries send no Service request at all: requests are bounded too (before the fix, 0.5 s
    # retries with creates sent ~60).
    requests, retries = rest_requests(app, "services"), passes(app, "requeue")
    time.sleep(15)
    first = (rest_requests(app, "services") - requests, passes(app, "requeue") - retries)
    time.sleep(15)
    second = (
        rest_requests(app, "services") - requests - first[0],
        passes(app, "requeue") - retries - first[1],
    )
    assert first[0] + second[0] <= 40 and second[0] <= 4, ("requests", first, second)
    assert first[1] + second[1] <= 15 and second[1] <= 2, ("retries", first, second)
    app.recorder.flush()
    warnings = [
        e
        for e in cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=train")[
            "items"
        ]
        if e["reason"] == "NameConflict"
    ]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning" and warnings[0].get("count", 1) == 1, (
        warnings
    )
    # never adopted, patched or deleted
    after = cluster.get("service", "train", "-n", namespace)["metadata"]
    assert (after["resourceVersion"], after.get("ownerReferences")) == (before["resourceVersion"], None)
    assert not cluster.get("jobs", "-n", namespace)["items"]

    # the user frees the name: the job starts by itself
    cluster.kubectl("delete", "service", "train", "-n", namespace)
    wait_until(lambda: phase_is(cluster, namespace, "Running"), 60, message="Running once the name is free")
    job = tj(cluster, namespace)
    ours = cluster.get("service", "train", "-n", namespace)["metadata"]["ownerReferences"]
    assert [(r["kind"], r["uid"], r["controller"]) for r in ours] == [
        ("TorchrunJob", job["metadata"]["uid"], True)
    ]
    assert condition(job, "Admitted")["reason"] == "Admitted"


def test_a_name_taken_by_a_foreign_job_is_a_name_conflict(
    cluster: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
            },
        },
    }
    cluster.apply(foreign, namespace)
    queue = make_queue(cluster, outcome="run")
    start_controller()
    make_job(cluster, namespace, queue)
    conflict = wait_until(
        lambda: (c := condition(tj(cluster, namespace), "Admitted")) and c["reason"] == "NameConflict" and c,
        30,
        message="NameConflict for the Job",
    )
    assert f"Job {namespace}/train" in conflict["message"]
    assert cluster.get("job", "train", "-n", namespace)["spec"]["suspend"] is True  # not touched
