"""The elastic autoscaler on the real control plane, kwok's 4 fake nodes of 8 GPUs each.

One story, each step waited for on the objects' own state: an elastic job (1..4 nodes of 8 GPUs)
starts beside a 2-node rigid job and grows into the one free node; when the rigid job finishes it
grows into the two nodes it freed, one node per pass; a second rigid job of 2 nodes then finds no
room (`Running=False Unschedulable`, for want of GPUs: read off a watch of the jobs, in the API
server's order, before the elastic job's first shrink), so the elastic job shrinks back, highest
node ranks first, and the rigid job runs. The elastic job is never restarted as a whole: its
worker Job stays the same object, with no failed index, and the shrink evicts exactly the pods of
ranks 3 and 2.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from jobs import make_job, queue_manifest
from testbed import Cluster, condition, wait_until

from controller.api.resources import TORCHRUNJOBS
from controller.cmd.main import App
from controller.rest import RESTClient

EVENT = re.compile(r"^(\d)→(\d) nodes, cluster GPU load (\d\.\d\d) → (\d\.\d\d) \(nvidia\.com/gpu; .+\)$")


def tj(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.get("torchrunjob", name, "-n", ns)


def size_is(cluster: Cluster, ns: str, name: str, nodes: int) -> dict[str, Any] | None:
    """The worker Job runs `nodes` pods and the job says so, Running."""
    job = tj(cluster, ns, name)
    worker = cluster.get("job", name, "-n", ns)
    running = condition(job, "Running") or {}
    ok = (
        (job.get("status") or {}).get("nodes") == nodes
        and worker["spec"]["parallelism"] == nodes
        and (worker.get("status") or {}).get("ready") == nodes
        and running.get("status") == "True"
    )
    return worker if ok else None


def running_pods(cluster: Cluster, ns: str, name: str) -> dict[int, str]:
    """Node rank → node of the job's live worker pods."""
    pods = cluster.get("pods", "-n", ns, "-l", f"torchrun-job-name={name}")["items"]
    return {
        int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]): p["spec"].get(
            "nodeName"
        )
        for p in pods
        if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") in ("Running", "Pending")
    }


@contextmanager
def job_history(rest: RESTClient, ns: str) -> Iterator[list[dict[str, Any]]]:
    """Every version of the namespace's TorchrunJobs, in the API server's order, from one watch
    held open while the block runs: what happened first is read off the server's own sequence,
    not guessed from polls or second-granular timestamps."""
    history: list[dict[str, Any]] = []
    stream = rest.watch(TORCHRUNJOBS, ns, allow_bookmarks=False)
    thread = threading.Thread(target=lambda: history.extend(e.object for e in stream), daemon=True)
    thread.start()
    try:
        yield history
    finally:
        whole = thread.is_alive()  # the watch had not ended (server timeout, silence, error) mid-way
        stream.stop()
        thread.join(10)
    assert whole, "the watch ended before the block did: the history may have a gap"


def first_version(history: list[dict[str, Any]], name: str, test: Callable[[dict[str, Any]], bool]) -> int:
    """The position in `history` of the first version of job `name` that passes `test`."""
    found = [i for i, job in enumerate(history) if job["metadata"]["name"] == name and test(job)]
    assert found, f"no version of {name} in the history did"
    return found[0]


def unschedulable(job: dict[str, Any]) -> bool:
    running = condition(job, "Running") or {}
    return (running.get("status"), running.get("reason")) == ("False", "Unschedulable")


def resize_events(cluster: Cluster, ns: str, name: str) -> list[tuple[str, int, int, float, float]]:
    items = cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")["items"]
    out = []
    for e in sorted(items, key=lambda e: e.get("firstTimestamp") or e["metadata"]["creationTimestamp"]):
        if e["reason"] in ("ScaledUp", "ScaledDown"):
            match = EVENT.match(e["message"])
            assert match, e["message"]
            a, b, before, after = match.groups()
            out.append((e["reason"], int(a), int(b), float(before), float(after)))
    return out


def test_an_elastic_job_grows_into_freed_nodes_and_shrinks_for_rigid_work(
    cluster: Cluster, namespace: str, rest: RESTClient, start_controller: Callable[..., App]
) -> None:
    tag = uuid.uuid4().hex[:6]
    forever, short = f"run-{tag}", f"done-{tag}"
    cluster.apply(queue_manifest(forever, outcome="run"))
    cluster.apply(queue_manifest(short, outcome="succeed", duration="40s"))
    # a pass a second, and the whole cluster may be used: 4 × 8 GPUs is small for the 0.97 default
    app = start_controller("--autoscaler-period", "1", "--max-load-desired", "1")

    make_job(cluster, namespace, short, "first", numNodes=2)
    wait_until(lambda: size_is(cluster, namespace, "first", 2), 60, message="the rigid job runs")
    elastic = {"minNodes": 1, "maxNodes": 4}
    make_job(
        cluster, namespace, forever, "elastic", numNodes=1, elastic=elastic, distributed={"maxRestarts": 3}
    )

    # the one free node: 1 → 2 while the rigid job still runs
    worker = wait_until(lambda: size_is(cluster, namespace, "elastic", 2), 60, message="elastic at 2 nodes")
    assert condition(tj(cluster, namespace, "first"), "Succeeded") is None, "grew while the rigid job ran"
    assert tj(cluster, namespace, "elastic")["status"]["desiredNodes"] == 2

    # the rigid job finishes: its two nodes free up, taken one node per pass
    wait_until(
        lambda: (condition(tj(cluster, namespace, "first"), "Succeeded") or {}).get("status") == "True",
        60,
        message="the rigid job succeeds",
    )
    wait_until(lambda: size_is(cluster, namespace, "elastic", 4), 60, message="elastic at 4 nodes")
    assert sorted(set(running_pods(cluster, namespace, "elastic").values())) == [
        f"gpu-node-{i}" for i in range(4)
    ]

    # rigid work that finds no room: the elastic job shrinks back, and the rigid job runs
    with job_history(rest, namespace) as history:
        make_job(cluster, namespace, forever, "second", numNodes=2)
        wait_until(lambda: size_is(cluster, namespace, "second", 2), 90, message="the second rigid job runs")
        wait_until(lambda: size_is(cluster, namespace, "elastic", 2), 30, message="elastic back at 2 nodes")
    # the rigid job really waited, Unschedulable for want of GPUs, before the elastic job shrank
    waited = first_version(history, "second", unschedulable)
    shrank = first_version(history, "elastic", lambda j: (j.get("status") or {}).get("desiredNodes", 4) < 4)
    assert waited < shrank, f"the elastic job shrank (event {shrank}) before the rigid job waited ({waited})"
    why = (condition(history[waited], "Running") or {})["message"]
    assert "Insufficient nvidia.com/gpu" in why, why

    events = resize_events(cluster, namespace, "elastic")
    assert [(r, a, b) for r, a, b, _, _ in events] == [
        ("ScaledUp", 1, 2),
        ("ScaledUp", 2, 3),
        ("ScaledUp", 3, 4),
        ("ScaledDown", 4, 3),
        ("ScaledDown", 3, 2),
    ]
    assert events[0][3:] == (0.75, 1.0), "1→2 took the last free node"
    assert events[-1][3] > events[-1][4], "a shrink lowers the load"
    # never a whole-job restart: the same worker Job, no failed index, ranks 0 and 1 kept
    final = cluster.get("job", "elastic", "-n", namespace)
    assert final["metadata"]["uid"] == worker["metadata"]["uid"]
    assert not (final.get("status") or {}).get("failedIndexes")
    assert (condition(final, "Failed") or {}).get("status") != "True", final["status"]
    job = tj(cluster, namespace, "elastic")
    assert job["status"]["restarts"] == 0 and job["status"]["phase"] == "Running"
    assert sorted(running_pods(cluster, namespace, "elastic")) == [0, 1]
    resizes = {
        s.labels["direction"]: s.value
        for m in app.metrics.registry.collect()
        if m.name == "torchrun_autoscaler_resizes"
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert resizes == {"up": 3.0, "down": 2.0}
