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
import time
import urllib.request
from pathlib import Path
from typing import Any

from burst import QUEUE, Arrivals, bench_queue, plain_maker, submit, wait_pods_running
from common import REPO, bench_client, control_plane, install_crds, percentile, rss_kib, table, torchrunjob
from controllers import start_torchrun_controller, stop

from controller.api.resources import TORCHRUNJOBS, TORCHRUNQUEUES
from controller.rest import RESTClient
from controller.rest.resources import JOBS, NAMESPACES, PODS

WRITE_VERBS = ("create", "update", "update/status", "patch", "patch/status", "delete")


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


def run_controller(kubeconfig: Path, rest: RESTClient, n: int, threadiness: int) -> dict[str, Any]:
    ns = "bench-ctl"
    rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    rest.create(TORCHRUNQUEUES, bench_queue())
    proc, port = start_torchrun_controller(
        kubeconfig, ns, threadiness=threadiness, qps=500, burst=1000, extra=("--resync-period", "20")
    )
    try:
        jobs_seen = Arrivals(rest, JOBS, ns)
        pods = Arrivals(rest, PODS, ns)

        def make(name: str) -> None:
            rest.create(TORCHRUNJOBS, torchrunjob(name, QUEUE), ns)

        sent = submit(make, n)
        start = min(sent.values())
        end = wait_pods_running(pods, 2 * n)
        latencies = [jobs_seen.times[k] - sent[k] for k in sent if k in jobs_seen.times]
        settled = wait_settled(port)
        time.sleep(25)  # > one resync period (20 s) with nothing changing
        idle = writes(port) - settled
        jobs_seen.stop()
        pods.stop()
        return {
            "jobs_per_s": n / (end - start),
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
            "writes_per_job": settled / n,
            "idle_writes": idle,
            "peak_rss_mib": rss_kib(proc.pid, "VmHWM") / 1024,
        }
    finally:
        stop(proc)


def run_baseline(rest: RESTClient, n: int) -> float:
    ns = "bench-plain"
    rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    pods = Arrivals(rest, PODS, ns)
    sent = submit(plain_maker(rest, ns), n)
    end = wait_pods_running(pods, 2 * n)
    pods.stop()
    return n / (end - min(sent.values()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--threadiness", type=int, default=4)
    args = ap.parse_args()
    with control_plane(nodes=4, pods_per_node=2 * args.jobs) as kubeconfig:
        install_crds(kubeconfig, REPO / "crd")
        rest = bench_client(kubeconfig)
        baseline = run_baseline(rest, args.jobs)
        ours = run_controller(kubeconfig, rest, args.jobs, args.threadiness)
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
