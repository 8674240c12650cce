"""Informer initial sync of N pods: seconds to synced and RSS per cached pod, with and without
the default transform (strip managedFields). Pods are created bound to kwok's fake nodes, so kwok
runs them and they carry realistic status.

    python hack/bench/bench_informer.py [--pods 10000] [--baseline CHECKOUT]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import bench_client, control_plane, rest_client, rss_kib, table

from controller.cache import SharedInformerFactory
from controller.cache.transforms import slim_pod, strip_managed_fields
from controller.rest import RESTClient
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


TRANSFORMS = {"none": None, "strip-managed-fields": strip_managed_fields, "slim-pod": slim_pod}


def _trim() -> None:
    """Collect garbage and give freed heap back to the OS, so RSS counts live objects only."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def deep_size(objs: list[Any]) -> int:
    """Bytes of every distinct object reachable from `objs` (shared, interned strings count once)."""
    seen: set[int] = set()
    stack: list[Any] = list(objs)
    total = 0
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, list | tuple):
            stack.extend(o)
    return total


def measure(kubeconfig: str, transform: str) -> dict[str, float]:
    """Run in a fresh interpreter so RSS readings are not polluted by earlier runs."""
    rest = rest_client(kubeconfig, qps=1000, burst=1000)
    factory = SharedInformerFactory(rest, namespace=NAMESPACE, transform=TRANSFORMS[transform])
    informer = factory.informer_for(PODS)
    _trim()
    before = rss_kib()
    stop = threading.Event()
    started = time.perf_counter()
    factory.start(stop)
    factory.wait_for_cache_sync(600)
    seconds = time.perf_counter() - started
    _trim()
    after = rss_kib()
    cached = informer.list()
    n = len(cached)
    stop.set()
    return {
        "pods": n,
        "seconds": seconds,
        "kib_total": after - before,
        "bytes_per_pod": (after - before) * 1024 / n,
        "live_per_pod": deep_size(cached) / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--measure", choices=sorted(TRANSFORMS))
    ap.add_argument("--kubeconfig")
    ap.add_argument(
        "--baseline",
        type=Path,
        help="also measure slim-pod with the controller package of this checkout (e.g. a worktree of "
        "an earlier commit), on the same pods, and print the ratio",
    )
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.kubeconfig, args.measure)))
        return
    with control_plane() as kubeconfig:
        rest = bench_client(kubeconfig)
        t0 = time.perf_counter()
        create_pods(rest, args.pods)
        print(f"created {args.pods} pods in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        time.sleep(5)  # let kwok finish writing pod status
        rows = []
        runs = [(mode, None) for mode in ("none", "strip-managed-fields", "slim-pod")]
        if args.baseline:
            runs.append(("slim-pod", args.baseline.resolve()))
        measured = {}
        for mode, checkout in runs:
            env = {**os.environ, "PYTHONPATH": str(checkout)} if checkout else None
            out = subprocess.run(
                [sys.executable, __file__, "--measure", mode, "--kubeconfig", str(kubeconfig)],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            ).stdout
            r = measured[(mode, checkout)] = json.loads(out.strip().splitlines()[-1])
            rows.append(
                [
                    f"{mode} ({checkout})" if checkout else mode,
                    int(r["pods"]),
                    f"{r['seconds']:.2f}",
                    int(r["kib_total"]),
                    f"{r['bytes_per_pod']:.0f}",
                    f"{r['live_per_pod']:.0f}",
                ]
            )
    print(
        table(
            ["transform", "pods", "sync seconds", "RSS added KiB", "RSS bytes/pod", "cached bytes/pod"], rows
        )
    )
    if args.baseline:
        ours, base = measured[("slim-pod", None)], measured[("slim-pod", args.baseline.resolve())]
        ratios = (ours[k] / base[k] for k in ("bytes_per_pod", "live_per_pod"))
        print(
            "slim-pod, this checkout ÷ baseline: RSS bytes/pod {:.2f}×, cached bytes/pod {:.2f}×".format(
                *ratios
            )
        )


if __name__ == "__main__":
    main()
