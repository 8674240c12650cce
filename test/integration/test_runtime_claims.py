"""Runtime claims of SPEC §7, measured on the real control plane: a status write that conflicts
is retried with backoff (and our own writes never conflict), `--kube-api-qps/--kube-api-burst`
bound the request rate the controller sends, and the JSON logs name the object of every
decision."""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import audit
from jobs import make_job, make_queue, queue_manifest
from testbed import Cluster, condition, controller_program, wait_until
from uploads import archive, upload, wait_running

from controller.api.resources import TORCHRUNJOBS
from controller.cmd.main import App

TJ = TORCHRUNJOBS.key
# the informers whose events enqueue a TorchrunJob (torchrunjob/wiring.py), the job's own aside
ENQUEUING = ("jobs.batch", "pods", "services", "persistentvolumeclaims", "torchrunqueues.torchrun.ai")
BASE_DELAY = 0.005  # the per-item backoff of the job controller's rate limiter, doubling per failure


def total(metric: Any, suffix: str = "_total", **labels: str) -> float:
    """The sum of `metric`'s samples named `…{suffix}` whose labels include `labels`."""
    return sum(
        s.value
        for m in metric.collect()
        for s in m.samples
        if s.name.endswith(suffix) and all(s.labels.get(k) == v for k, v in labels.items())
    )


def passes(app: App) -> float:
    """Reconciles of TorchrunJobs the controller finished, whatever their result."""
    return total(app.metrics.reconcile_total, controller="torchrunjob")


def status_writes(app: App, code: str) -> float:
    return total(app.metrics.rest_requests, verb="update/status", resource=TJ, code=code)


def enqueuing_events(app: App) -> float:
    return sum(total(app.metrics.informer_events, resource=r) for r in ENQUEUING)


def job(cluster: Cluster, ns: str, name: str = "train") -> dict[str, Any]:
    return cluster.get("torchrunjob", name, "-n", ns)


def phase(cluster: Cluster, ns: str, name: str = "train") -> str:
    return str((job(cluster, ns, name).get("status") or {}).get("phase", ""))


def is_true(cluster: Cluster, ns: str, ctype: str) -> bool:
    c = condition(job(cluster, ns), ctype)
    return c is not None and c["status"] == "True"


def quiet(app: App, seconds: float = 1.0) -> bool:
    """No TorchrunJob pass ends during `seconds`."""
    before = passes(app)
    time.sleep(seconds)
    return passes(app) == before


# -- 409 on a status write -----------------------------------------------------------------


def test_a_conflicting_status_write_backs_off_and_our_own_writes_never_conflict(
    cluster: Cluster,
    namespace: str,
    start_controller: Callable[..., App],
    record_property: Callable[[str, object], None],
) -> None:
    """SPEC §7: conflicts → requeue with a fresh read, through the rate limiter.

    1. A job goes Pending → Running with nobody else writing it: none of our status writes is a
       409 (a pass requeued at once after our own write would read the cache before that write's
       watch event and conflict with ourselves), and once Running the job goes quiet.
    2. The job's watch goes silent (as a dead connection does until the reflector's read timeout
       drops it) while another writer changes the job: every status write is now a 409 for as
       long as the cache stays behind. The queue is deleted, so the controller has something to
       write (Admitted=False). Over 3 s the passes must grow like the per-item backoff (5 ms
       doubling: at most log2(3 s / 5 ms + 1) ≈ 10 retries) plus one per event that enqueued the
       job — not the hundreds a requeue at once would make — and each one is a rate-limited retry.
    3. A controller with a fresh cache writes the status at its first try."""
    queue = make_queue(cluster, gpus=8, duration="1s", outcome="run")
    app = start_controller()
    make_job(cluster, namespace, queue)
    wait_until(lambda: is_true(cluster, namespace, "Running"), 60, message="Running")
    wait_until(lambda: quiet(app), 15, interval=0.1, message="no more passes once Running")
    assert status_writes(app, "200") >= 2 and status_writes(app, "409") == 0, "our own writes conflicted"

    app.factory.informer_for(TORCHRUNJOBS).shutdown()  # the watch goes silent; the cache stays
    cluster.kubectl("annotate", "torchrunjob", "train", "-n", namespace, "another-writer=was-here")
    cluster.kubectl("delete", "torchrunqueue", queue)
    wait_until(lambda: status_writes(app, "409") >= 1, 30, message="a status write conflicts")
    retries = "workqueue_retries"
    before = (passes(app), enqueuing_events(app), status_writes(app, "409"))
    retried = total(app.metrics.registry, name="torchrunjob", suffix=f"{retries}_total")
    window = 3.0
    time.sleep(window)  # observe what the controller does on its own
    grew = passes(app) - before[0]
    events = enqueuing_events(app) - before[1]
    backoff = math.ceil(math.log2(window / BASE_DELAY + 1))
    record_property("note", f"{grew:g} passes in {window}s of conflicts ({events:g} enqueuing events)")
    assert 3 <= grew <= events + backoff + 2, f"{grew} passes in {window}s ({events} events)"
    assert status_writes(app, "409") - before[2] >= grew - 1, "a pass ended without retrying the write"
    assert total(app.metrics.registry, name="torchrunjob", suffix=f"{retries}_total") - retried >= grew - 1

    app.shutdown()
    fresh = start_controller()
    admitted = wait_until(
        lambda: (c := condition(job(cluster, namespace), "Admitted")) and c["status"] == "False" and c,
        30,
        message="Admitted=False written",
    )
    assert admitted["reason"] == "QueueNotFound", admitted
    # the write's answer is counted when the client has read it, which may be after the API
    # server's object shows the write to this test
    wait_until(lambda: status_writes(fresh, "200") >= 1, 10, message="the write counted")
    assert status_writes(fresh, "409") == 0


# -- --kube-api-qps / --kube-api-burst ----------------------------------------------------------


LATENCY = 1.0  # seconds a request may take between taking its token and being counted


class RequestRate:
    """Samples the requests an App has sent (its REST metrics: every attempt, watches included)
    every 0.2 s in a thread, from `start()` to `stop()`."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sent(self) -> float:
        return total(self.app.metrics.rest_requests)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.sent()))
            self._stop.wait(0.2)
        self.samples.append((time.monotonic(), self.sent()))

    def start(self) -> RequestRate:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def excess(self, qps: float, burst: int) -> float:
        """The most requests any window of the samples holds beyond what a token bucket of
        `qps`/`burst` lets through in it (a request counted late by up to LATENCY included)."""
        return max(
            (n2 - n1) - (burst + qps * (t2 - t1 + LATENCY))
            for i, (t1, n1) in enumerate(self.samples)
            for t2, n2 in self.samples[i + 1 :]
        )


def written_excess(events: list[audit.Event], qps: float, burst: int) -> float:
    """`RequestRate.excess` of the writes the API server received (its own timestamps)."""
    times = sorted(audit.received(e).timestamp() for e in events)
    return max(
        (j - i + 1) - (burst + qps * (times[j] - times[i] + LATENCY))
        for i in range(len(times))
        for j in range(i, len(times))
    )


def small_jobs(queue: str, names: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": name},
            "spec": {
                "jobQueue": queue,
                "numNodes": 1,
                "command": "python train.py",
                "workspace": {"source": "none"},
            },
        }
        for name in names
    ]


def test_kube_api_qps_and_burst_bound_the_request_rate(
    cluster: Cluster,
    namespace: str,
    start_controller: Callable[..., App],
    record_property: Callable[[str, object], None],
) -> None:
    """40 jobs at once under `--kube-api-qps 5 --kube-api-burst 5`: in no window of the 6 s
    measured does the controller send more than 5 + 5/s × (window + 1 s) requests (by its REST
    metrics, every request counted; and by the API server's audit log, which timestamps the
    writes as it received them), while the limiter really held requests back (the work wanted
    more). The same measurement under `--kube-api-qps 500 --kube-api-burst 1000`, on what is left
    of the work, sees rates the low limit forbids: the bound is the limit's, not the workload's."""
    qps, burst, window = 5.0, 5, 6.0
    queue = f"q-{uuid.uuid4().hex[:6]}"
    cluster.apply(queue_manifest(queue, "run", nodeResources={"gpus": 0, "cpus": "20m"}))
    names = [f"burst-{i:02d}" for i in range(40)]

    slow = start_controller("--kube-api-qps", str(qps), "--kube-api-burst", str(burst))
    rate = RequestRate(slow).start()
    waited = total(slow.metrics.rest_rate_limiter_wait, suffix="_sum")
    started = datetime.now().astimezone()
    cluster.apply(small_jobs(queue, names), namespace)
    time.sleep(window)  # observe
    rate.stop()
    held_back = total(slow.metrics.rest_rate_limiter_wait, suffix="_sum") - waited
    slow.shutdown()
    stopped = datetime.now().astimezone()

    assert rate.excess(qps, burst) <= 0, (
        f"{rate.excess(qps, burst):.1f} requests over the limit: {rate.samples}"
    )
    assert held_back >= window, f"the limiter held requests back {held_back:.1f}s in all: no pressure"
    audit.flush(cluster, namespace)
    writes = [
        e
        for e in audit.events(cluster, namespace)
        if e.get("userAgent") == "torchrun-controller"
        and e.get("stage") == "ResponseComplete"
        and started <= audit.received(e) <= stopped
    ]
    assert len(writes) >= 2 * burst, f"only {len(writes)} writes seen: was the controller working?"
    assert written_excess(writes, qps, burst) <= 0, "the API server received writes faster than the limit"

    fast = start_controller("--kube-api-qps", "500", "--kube-api-burst", "1000")
    unlimited = RequestRate(fast).start()
    wait_until(
        lambda: len(cluster.get("jobs", "-n", namespace)["items"]) == len(names),
        120,
        interval=0.5,
        message="a worker Job for every job",
    )
    unlimited.stop()
    record_property(
        "note",
        f"qps {qps:g}/burst {burst}: {rate.samples[-1][1] - rate.samples[0][1]:g} requests in "
        f"{window:g}s, held back {held_back:.1f}s in all by the limiter; "
        f"qps 500: up to {unlimited.excess(qps, burst):.0f} requests over the low limit in a window",
    )
    assert unlimited.excess(qps, burst) > 0, f"the work never needed more than {qps}/s: {unlimited.samples}"
    cluster.kubectl("delete", "torchrunqueue", queue, "--wait=false")


# -- JSON logs carry the key ----------------------------------------------------------------


def test_every_log_line_about_a_job_carries_its_key(
    cluster: Cluster, crds: Path, namespace: str, tmp_path: Path
) -> None:
    """`torchrun-controller --log-format json` (debug level: every pass too) drives an upload job
    through its whole life — claim and sync pod created, Syncing, the code uploaded and synced,
    Service and worker Job created, Running, Succeeded. Every line is one JSON object; every line
    that mentions the job (its name anywhere in it: a child's name, a message) carries the job's
    `key`, namespace/name, and every line about its queue the queue's `key`; and each of those
    decisions was logged."""
    name, queue = f"logged-{uuid.uuid4().hex[:6]}", f"q-{uuid.uuid4().hex[:6]}"
    cluster.apply(queue_manifest(queue, "succeed", "2s"))
    log = tmp_path / "controller.log"
    command = ("--log-format", "json", "--log-level", "debug")
    with controller_program(cluster.kubeconfig, namespace, log, *command):
        make_job(cluster, namespace, queue, name, workspace={"source": "upload"})
        wait_running(cluster, namespace, f"{name}-sync-0")
        done = upload(cluster, namespace, f"{name}-sync-0", archive({"train.py": b"print('hi')\n"}), 0)
        assert done.returncode == 0, done.stderr.decode()
        wait_until(lambda: phase(cluster, namespace, name) == "Succeeded", 90, message="Succeeded")
        wait_until(lambda: '"phase": "Succeeded"' in log.read_text(), 10, message="the last status logged")
    cluster.kubectl("delete", "torchrunqueue", queue, "--wait=false")

    lines = [line for line in log.read_text().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line is JSON
    about_job = [e for e in entries if name in json.dumps(e)]
    unkeyed = [e for e in about_job if e.get("key") != f"{namespace}/{name}"]
    assert not unkeyed, "lines about the job without its key:\n" + "\n".join(map(json.dumps, unkeyed))
    about_queue = [e for e in entries if queue in json.dumps(e) and e not in about_job]
    unkeyed = [e for e in about_queue if e.get("key") != queue]
    assert about_queue and not unkeyed, "lines about the queue without its key:\n" + "\n".join(
        map(json.dumps, unkeyed)
    )

    created = {(e["resource"], e["name"]) for e in about_job if e["event"] == "created"}
    assert created >= {
        ("persistentvolumeclaims", f"{name}-workspace"),
        ("pods", f"{name}-sync-0"),
        ("services", name),
        ("jobs.batch", name),
    }, created
    assert any(e["event"] == "workspace synced" for e in about_job)
    phases = [e["phase"] for e in about_job if e["event"] == "status"]
    assert {"Syncing", "Running", "Succeeded"} <= set(phases), phases
    assert any(e["event"] == "reconciled" for e in about_job)
