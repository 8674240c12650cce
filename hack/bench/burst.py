"""The burst workload's parts (W1 of bench_jobs.py and bench_peers.py): N two-node jobs submitted
at once, watched until every pod is Running.

`Arrivals` records, from a watch, when each object of one resource in one namespace was first
seen (client clock, `time.perf_counter`) and which pods are Running; `submit` creates N objects
from a thread pool and returns when each create was sent. The manifests are the same two-node job
in each form the benchmarks compare: a TorchrunJob (`common.torchrunjob` of `QUEUE`), and the
plain Indexed Job + headless Service a bare client creates (the ceiling of the Indexed-Job
design). Job names are `j0000`, `j0001`, ...; every pod's name starts with its job's name and a
dash, whoever created it (`job_of`).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from controller.rest import RESTClient
from controller.rest.resources import JOBS, PODS, SERVICES

IMAGE = "pytorch/pytorch:2.4.0"
QUEUE = "bench"
_JOB_NAME = re.compile(r"^(j\d{4,})-")


def job_name(i: int) -> str:
    return f"j{i:04d}"


def job_of(pod_name: str) -> str | None:
    """The job a pod belongs to, from its name (`j0042-...` → `j0042`)."""
    m = _JOB_NAME.match(pod_name)
    return m.group(1) if m else None


class Arrivals:
    """Client-side arrival time of each object's first watch event, and the pods seen Running (with
    the time each was first seen so), for one resource in one namespace; a daemon thread."""

    def __init__(self, rest: RESTClient, resource: Any, ns: str) -> None:
        self.times: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self._stop = threading.Event()
        self._rest, self._res, self._ns = rest, resource, ns
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(30)

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:  # the control plane goes away at the end of the run
            if not self._stop.is_set():
                raise

    def _watch(self) -> None:
        rv = self._rest.list(self._res, self._ns, limit=1)["metadata"]["resourceVersion"]
        self._ready.set()
        while not self._stop.is_set():
            for ev in self._rest.watch(self._res, self._ns, resource_version=rv, timeout_seconds=600):
                meta = ev.object.get("metadata") or {}
                rv = meta.get("resourceVersion", rv)
                name = meta.get("name", "")
                now = time.perf_counter()
                self.times.setdefault(name, now)
                if self._res is PODS and (ev.object.get("status") or {}).get("phase") == "Running":
                    self.running.setdefault(name, now)

    def stop(self) -> None:
        self._stop.set()


def submit(make: Callable[[str], None], n: int, workers: int = 16) -> dict[str, float]:
    """Call `make(name)` for N job names from `workers` threads; when each call started."""
    sent: dict[str, float] = {}

    def one(i: int) -> None:
        name = job_name(i)
        t = time.perf_counter()
        make(name)
        sent[name] = t

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(n)))
    return sent


def wait_pods_running(arrivals: Arrivals, want: int, timeout: float = 1800) -> float:
    """When (perf_counter) `want` pods were Running; raises after `timeout` seconds."""
    deadline = time.perf_counter() + timeout
    while len(arrivals.running) < want:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {len(arrivals.running)}/{want} pods Running")
        time.sleep(0.2)
    return time.perf_counter()


def per_job(pod_times: dict[str, float], reduce: Callable[[list[float]], float]) -> dict[str, float]:
    """Pod times grouped by job (`job_of`) and reduced to one time per job (min: first, max: last)."""
    grouped: dict[str, list[float]] = {}
    for pod, t in pod_times.items():
        job = job_of(pod)
        if job:
            grouped.setdefault(job, []).append(t)
    return {job: reduce(ts) for job, ts in grouped.items()}


def wait_http_ok(url: str, timeout: float = 120) -> None:
    """Poll `url` until it answers 200 (a health endpoint); raises after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} never answered 200")
        time.sleep(0.3)


def bench_queue() -> dict[str, Any]:
    """The TorchrunQueue the burst's TorchrunJobs are submitted to."""
    return {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunQueue",
        "metadata": {"name": QUEUE},
        "spec": {"nodeResources": {"gpus": 0}, "image": IMAGE},
    }


def plain_service(name: str) -> dict[str, Any]:
    """The headless Service of the plain two-node job (rendezvous by pod hostname)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"j": name}, "ports": [{"port": 29400}]},
    }


def plain_job(name: str) -> dict[str, Any]:
    """The plain two-node Indexed Job: what a controller on the Indexed-Job design creates at least."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "template": {
                "metadata": {"labels": {"j": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": name,
                    "containers": [{"name": "torchrun", "image": IMAGE}],
                },
            },
        },
    }


def plain_maker(rest: RESTClient, ns: str) -> Callable[[str], None]:
    """`make(name)` of the ceiling: the Service, then the Job, as a bare client creates them."""

    def make(name: str) -> None:
        rest.create(SERVICES, plain_service(name), ns)
        rest.create(JOBS, plain_job(name), ns)

    return make
