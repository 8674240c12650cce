"""Informer initial sync of N pods: seconds to synced and RSS per cached pod, with and without
the default transform (strip managedFields). Pods are created bound to kwok's fake nodes, so kwok
runs them and they carry realistic status.

    python hack/bench/bench_informer.py [--pods 10000]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from common import control_plane, rss_kib, table

from controller.cache import SharedInformerFactory
from controller.cache.informer import strip_managed_fields
from controller.rest import RESTClient, load_config
from controller.rest.resources import NAMESPACES, PODS

NAMESPACE = "bench"


def create_pods(rest: RESTClient, count: int) -> None:
    rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})

    def one(i: int) -> None:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p-{i:05d}", "labels": {"app": "bench", "torchrun-job-name": f"j{i // 2}"}},
            "spec": {
                "nodeName": f"gpu-node-{i % 4}",
                "containers": [
                    {"name": "main", "image": "pytorch/pytorch:2.4.0", "command": ["torchrun", "train.py"]}
                ],
            },
        }
        rest.create(PODS, pod, NAMESPACE)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))


def measure(kubeconfig: str, transform: bool) -> dict[str, float]:
    """Run in a fresh interpreter so RSS readings are not polluted by earlier runs."""
    gc.collect()
    rest = RESTClient(load_config(kubeconfig), qps=1000, burst=1000)
    factory = SharedInformerFactory(
        rest, namespace=NAMESPACE, transform=strip_managed_fields if transform else None
    )
    informer = factory.informer_for(PODS)
    gc.collect()
    before = rss_kib()
    stop = threading.Event()
    started = time.perf_counter()
    factory.start(stop)
    factory.wait_for_cache_sync(600)
    seconds = time.perf_counter() - started
    gc.collect()
    after = rss_kib()
    n = len(informer.list())
    stop.set()
    return {
        "pods": n,
        "seconds": seconds,
        "kib_total": after - before,
        "bytes_per_pod": (after - before) * 1024 / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--measure", choices=["transform", "raw"])
    ap.add_argument("--kubeconfig")
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.kubeconfig, args.measure == "transform")))
        return
    with control_plane() as kubeconfig:
        rest = RESTClient(load_config(str(kubeconfig)), qps=2000, burst=2000, pool_size=32)
        t0 = time.perf_counter()
        create_pods(rest, args.pods)
        print(f"created {args.pods} pods in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        time.sleep(5)  # let kwok finish writing pod status
        rows = []
        for mode in ("transform", "raw"):
            out = subprocess.run(
                [sys.executable, __file__, "--measure", mode, "--kubeconfig", str(kubeconfig)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            rows.append(
                [
                    mode,
                    int(r["pods"]),
                    f"{r['seconds']:.2f}",
                    int(r["kib_total"]),
                    f"{r['bytes_per_pod']:.0f}",
                ]
            )
    print(table(["cache", "pods", "sync seconds", "RSS added KiB", "bytes/pod"], rows))


if __name__ == "__main__":
    main()
