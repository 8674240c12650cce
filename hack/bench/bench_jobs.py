"""Controller throughput: N two-node TorchrunJobs (workspace none) submitted as fast as possible.

Reports jobs/s from the first submit to all pods Running, submit→Job-created latency (p50/p99,
from watch arrival times), API writes per job (from the controller's own REST metrics), writes
during one idle resync (target 0), the controller's peak RSS; and, as the API server's own limit
on this machine, the same N Jobs + Services created by a plain client with no controller — our
throughput as a ratio of it (target ≥ 0.8).

    python hack/bench/bench_jobs.py [--jobs 1000] [--threadiness 4]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import REPO, control_plane, free_port, percentile, rss_kib, table

from controller.api.resources import TORCHRUNJOBS, TORCHRUNQUEUES
from controller.rest import RESTClient, load_config
from controller.rest.resources import JOBS, NAMESPACES, PODS, SERVICES

WRITE_VERBS = ("create", "update", "update/status", "patch", "patch/status", "delete")


class Arrivals:
    """Client-side arrival time of each object's first watch event."""

    instances: list[Arrivals] = []

    def __init__(self, rest: RESTClient, resource: Any, ns: str) -> None:
        Arrivals.instances.append(self)
        self.times: dict[str, float] = {}
        self.running: set[str] = set()
        self._stop = threading.Event()
        self._rest, self._res, self._ns = rest, resource, ns
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:  # the control plane goes away at the end of the run
            if not self._stop.is_set():
                raise

    def _watch(self) -> None:
        rv = self._rest.list(self._res, self._ns, limit=1)["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            for ev in self._rest.watch(self._res, self._ns, resource_version=rv, timeout_seconds=600):
                meta = ev.object.get("metadata") or {}
                rv = meta.get("resourceVersion", rv)
                name = meta.get("name", "")
                self.times.setdefault(name, time.perf_counter())
                if self._res is PODS and (ev.object.get("status") or {}).get("phase") == "Running":
                    self.running.add(name)

    def stop(self) -> None:
        self._stop.set()


def writes(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("rest_client_requests_total{") and any(f'verb="{v}"' in line for v in WRITE_VERBS):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_settled(port: int, quiet: float = 10.0, timeout: float = 600) -> float:
    """The controller's write count once it has stopped moving for `quiet` seconds."""
    deadline = time.perf_counter() + timeout
    last, since = writes(port), time.perf_counter()
    while time.perf_counter() - since < quiet:
        if time.perf_counter() > deadline:
            raise TimeoutError("the controller never went quiet")
        time.sleep(1)
        now = writes(port)
        if now != last:
            last, since = now, time.perf_counter()
    return last


def submit(rest: RESTClient, ns: str, make: Any, n: int, workers: int = 16) -> dict[str, float]:
    sent: dict[str, float] = {}

    def one(i: int) -> None:
        name = f"j{i:04d}"
        t = time.perf_counter()
        make(name)
        sent[name] = t

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(n)))
    return sent


def wait_pods_running(arrivals: Arrivals, want: int, timeout: float = 1800) -> float:
    deadline = time.perf_counter() + timeout
    while len(arrivals.running) < want:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {len(arrivals.running)}/{want} pods Running")
        time.sleep(0.2)
    return time.perf_counter()


def run_controller(kubeconfig: Path, rest: RESTClient, n: int, threadiness: int) -> dict[str, Any]:
    ns = "bench-ctl"
    rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    rest.create(
        TORCHRUNQUEUES,
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": {"name": "bench"},
            "spec": {"nodeResources": {"gpus": 0}, "image": "pytorch/pytorch:2.4.0"},
        },
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller.cmd.main",
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            ns,
            "--threadiness",
            str(threadiness),
            "--kube-api-qps",
            "500",
            "--kube-api-burst",
            "1000",
            "--resync-period",
            "20",
            "--metrics-addr",
            f"127.0.0.1:{port}",
            "--health-addr",
            f"127.0.0.1:{free_port()}",
            "--log-level",
            "warning",
        ],
        cwd=REPO,
    )
    try:
        time.sleep(3)
        jobs_seen = Arrivals(rest, JOBS, ns)
        pods = Arrivals(rest, PODS, ns)
        time.sleep(1)

        def make(name: str) -> None:
            rest.create(
                TORCHRUNJOBS,
                {
                    "apiVersion": "torchrun.ai/v1alpha1",
                    "kind": "TorchrunJob",
                    "metadata": {"name": name},
                    "spec": {
                        "jobQueue": "bench",
                        "numNodes": 2,
                        "command": "python train.py",
                        "workspace": {"source": "none"},
                    },
                },
                ns,
            )

        sent = submit(rest, ns, make, n)
        start = min(sent.values())
        end = wait_pods_running(pods, 2 * n)
        latencies = [jobs_seen.times[k] - sent[k] for k in sent if k in jobs_seen.times]
        settled = wait_settled(port)
        time.sleep(25)  # > one resync period (20 s) with nothing changing
        idle = writes(port) - settled
        return {
            "jobs_per_s": n / (end - start),
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
            "writes_per_job": settled / n,
            "idle_writes": idle,
            "peak_rss_mib": rss_kib(proc.pid, "VmHWM") / 1024,
        }
    finally:
        proc.terminate()
        proc.wait(60)


def run_baseline(rest: RESTClient, n: int) -> float:
    ns = "bench-plain"
    rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    time.sleep(1)
    pods = Arrivals(rest, PODS, ns)
    time.sleep(1)

    def make(name: str) -> None:
        rest.create(
            SERVICES,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name},
                "spec": {"clusterIP": "None", "selector": {"j": name}, "ports": [{"port": 29400}]},
            },
            ns,
        )
        rest.create(
            JOBS,
            {
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
                            "containers": [{"name": "torchrun", "image": "pytorch/pytorch:2.4.0"}],
                        },
                    },
                },
            },
            ns,
        )

    sent = submit(rest, ns, make, n)
    end = wait_pods_running(pods, 2 * n)
    return n / (end - min(sent.values()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--threadiness", type=int, default=4)
    args = ap.parse_args()
    with control_plane(nodes=4, pods_per_node=2 * args.jobs) as kubeconfig:
        kubectl = Path.home() / ".cache/torchrun-controller/bin/kube-v1.34.4/kubectl"
        subprocess.run(
            [
                str(kubectl),
                "--kubeconfig",
                str(kubeconfig),
                "apply",
                "--server-side",
                "-f",
                str(REPO / "crd"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        subprocess.run(
            [
                str(kubectl),
                "--kubeconfig",
                str(kubeconfig),
                "wait",
                "--for=condition=Established",
                "crd",
                "--all",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        rest = RESTClient(load_config(str(kubeconfig)), qps=2000, burst=2000, pool_size=32)
        baseline = run_baseline(rest, args.jobs)
        ours = run_controller(kubeconfig, rest, args.jobs, args.threadiness)
        for arrivals in Arrivals.instances:
            arrivals.stop()
    print(
        table(
            ["metric", "value"],
            [
                ["jobs", args.jobs],
                ["controller jobs/s (submit → all pods Running)", f"{ours['jobs_per_s']:.1f}"],
                ["plain client Jobs+Services/s (no controller)", f"{baseline:.1f}"],
                ["ratio (target ≥ 0.8)", f"{ours['jobs_per_s'] / baseline:.2f}"],
                ["submit → Job created p50 / p99 (s)", f"{ours['p50']:.2f} / {ours['p99']:.2f}"],
                ["API writes per job", f"{ours['writes_per_job']:.1f}"],
                ["writes during one idle resync (target 0)", int(ours["idle_writes"])],
                ["controller peak RSS (MiB)", f"{ours['peak_rss_mib']:.0f}"],
            ],
        )
    )


if __name__ == "__main__":
    main()
