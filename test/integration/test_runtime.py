"""The runtime against the real control plane: informers, relists, restarts, leases, metrics."""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from testbed import Cluster, wait_until

from controller.cache import DeletedFinalStateUnknown, Lister, SharedIndexInformer, SharedInformerFactory
from controller.cache.informer import FuncHandler
from controller.metrics.registry import ControllerMetrics
from controller.metrics.server import MetricsServer
from controller.metrics.workqueue import PrometheusWorkqueueMetricsProvider
from controller.rest import RESTClient, load_config
from controller.rest.resources import CONFIGMAPS
from controller.runtime import Controller, Result
from controller.workqueue import RateLimitingQueue, default_controller_rate_limiter


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "t"}},
        "data": data,
    }


def create_many(rest: RESTClient, ns: str, names: list[str]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: rest.create(CONFIGMAPS, configmap(n, v="0"), ns), names))


class Events:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, str]] = []

    def handler(self) -> FuncHandler:
        def rec(kind: str, obj: Any) -> None:
            if isinstance(obj, DeletedFinalStateUnknown):
                kind, obj = "tombstone", obj.obj
            meta = obj["metadata"]
            with self.lock:
                self.log.append((kind, meta["name"], meta.get("resourceVersion", "")))

        return FuncHandler(
            add=lambda o, initial: rec("initial" if initial else "add", o),
            update=lambda old, new: rec("update", new),
            delete=lambda o: rec("delete", o),
        )

    def kinds_for(self, name: str) -> list[str]:
        with self.lock:
            return [k for k, n, _ in self.log if n == name]


def start_informer(rest: RESTClient, ns: str) -> tuple[SharedIndexInformer, Events, threading.Event]:
    factory = SharedInformerFactory(rest, namespace=ns)
    informer = factory.informer_for(
        CONFIGMAPS, indexers={"value": lambda o: [o.get("data", {}).get("v", "")]}
    )
    events = Events()
    informer.add_event_handler(events.handler())
    stop = threading.Event()
    factory.start(stop)
    assert factory.wait_for_cache_sync(60) == {"configmaps": True}
    return informer, events, stop


def server_state(rest: RESTClient, ns: str) -> dict[str, str]:
    items = rest.list(CONFIGMAPS, ns)["items"]
    return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}


def cache_state(informer: SharedIndexInformer) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in informer.list()}


def test_informer_syncs_1000_objects_with_lister_and_index(rest: RESTClient, namespace: str) -> None:
    names = [f"cm-{i:04d}" for i in range(1000)]
    create_many(rest, namespace, names)
    rest.patch(CONFIGMAPS, "cm-0007", {"data": {"v": "special"}}, namespace)
    informer, events, stop = start_informer(rest, namespace)
    try:
        lister = Lister(informer.indexer)
        assert len(lister.list(namespace)) == 1001  # + kube-root-ca.crt
        assert len(lister.list(namespace, {"app": "t"})) == 1000
        assert lister.get("cm-0999", namespace) is not None
        assert [o["metadata"]["name"] for o in lister.by_index("value", "special")] == ["cm-0007"]
        assert informer.reflector.metrics.informer_lists.labels("configmaps")._value.get() == 1
        assert sum(1 for k, _, _ in events.log if k == "initial") == 1001
    finally:
        stop.set()


def test_create_update_delete_arrive_in_order(rest: RESTClient, namespace: str) -> None:
    informer, events, stop = start_informer(rest, namespace)
    try:
        rest.create(CONFIGMAPS, configmap("x", v="1"), namespace)
        for v in "234":
            rest.patch(CONFIGMAPS, "x", {"data": {"v": v}}, namespace)
        rest.delete(CONFIGMAPS, "x", namespace)
        wait_until(lambda: "delete" in events.kinds_for("x"), 30, message="delete event")
        assert events.kinds_for("x") == ["add", "update", "update", "update", "delete"]
        rvs = [int(rv) for k, n, rv in events.log if n == "x"]
        assert rvs == sorted(rvs)
        assert informer.get(f"{namespace}/x") is None
    finally:
        stop.set()


def _etcd_key(ns: str, name: str) -> str:
    return base64.b64encode(f"/registry/configmaps/{ns}/{name}".encode()).decode()


def test_forced_410_relists_and_tombstones_what_vanished(
    cluster: Cluster, rest: RESTClient, namespace: str
) -> None:
    create_many(rest, namespace, ["keep", "vanish"])
    informer, events, stop = start_informer(rest, namespace)
    try:
        cluster.stop("kube-apiserver")  # the informer's watch is down from here
        # behind the API server's back: the object disappears, then history is compacted away
        cluster.etcd("kv/deleterange", {"key": _etcd_key(namespace, "vanish")})
        rev = int(cluster.etcd("kv/range", {"key": _etcd_key(namespace, "keep")})["header"]["revision"])
        cluster.etcd("kv/compaction", {"revision": rev, "physical": True})
        cluster.start("kube-apiserver")
        wait_until(lambda: "tombstone" in events.kinds_for("vanish"), 120, message="tombstone for 'vanish'")
        assert informer.get(f"{namespace}/vanish") is None
        assert informer.get(f"{namespace}/keep") is not None
        assert informer.metrics.informer_relists.labels("configmaps", "gone")._value.get() >= 1
    finally:
        stop.set()
        cluster.start("kube-apiserver")


def test_informer_recovers_after_apiserver_restart(
    cluster: Cluster, rest: RESTClient, namespace: str
) -> None:
    create_many(rest, namespace, [f"r-{i}" for i in range(20)])
    informer, _, stop = start_informer(rest, namespace)

    def failed_requests() -> float:
        """The informer's list/watch requests that got no answer (the REST client counts them
        with code "<error>"): each one is followed by a backoff before the next try."""
        return sum(
            s.value
            for metric in rest.metrics.rest_requests.collect()
            for s in metric.samples
            if s.name.endswith("_total")
            and s.labels.get("resource") == "configmaps"
            and s.labels.get("verb") in ("list", "watch")
            and s.labels.get("code") == "<error>"
        )

    try:
        assert failed_requests() == 0
        cluster.stop("kube-apiserver")
        # the informer noticed the dead watch: a retry failed, so it is backing off now
        wait_until(lambda: failed_requests() >= 1, 30, message="the informer to retry and fail")
        cluster.start("kube-apiserver")
        rest.delete(CONFIGMAPS, "r-0", namespace)
        rest.patch(CONFIGMAPS, "r-1", {"data": {"v": "after"}}, namespace)
        rest.create(CONFIGMAPS, configmap("r-new"), namespace)
        wait_until(
            lambda: cache_state(informer) == server_state(rest, namespace),
            120,
            message="cache equals server state",
        )
    finally:
        stop.set()
        cluster.start("kube-apiserver")


def test_two_candidates_one_leader_and_handover(cluster: Cluster, namespace: str) -> None:
    script = Path(__file__).with_name("leader_candidate.py")
    procs = {
        ident: subprocess.Popen(
            [sys.executable, str(script), str(cluster.kubeconfig), namespace, ident],
            stdout=subprocess.PIPE,
            text=True,
        )
        for ident in ("alpha", "beta")
    }
    lines: dict[str, list[str]] = {ident: [] for ident in procs}

    def reader(ident: str) -> None:
        out = procs[ident].stdout
        assert out is not None
        for line in out:
            lines[ident].append(line.strip())

    for ident in procs:
        threading.Thread(target=reader, args=(ident,), daemon=True).start()
    try:
        leader = wait_until(
            lambda: next((i for i in procs if f"LEADING {i}" in lines[i]), None), 30, message="a leader"
        )
        other = "beta" if leader == "alpha" else "alpha"
        # a window of lease duration (4 s) + 2 s, watched throughout: a leader that stopped renewing
        # would lose the Lease inside it. The holder stays, the Lease is renewed, the loser stands by.
        window = 4.0 + 2.0
        first = cluster.get("lease", "candidates", "-n", namespace)["spec"]
        renewals = {first["renewTime"]}
        end = time.monotonic() + window
        while time.monotonic() < end:
            lease = cluster.get("lease", "candidates", "-n", namespace)["spec"]
            assert lease["holderIdentity"] == leader, lease
            assert f"LEADING {other}" not in lines[other], lines[other]
            renewals.add(lease["renewTime"])
            time.sleep(0.2)
        assert len(renewals) >= 2, f"the leader never renewed its Lease in {window}s: {renewals}"

        procs[leader].kill()  # no release: the successor must wait out the lease
        killed_at = time.monotonic()
        wait_until(lambda: f"LEADING {other}" in lines[other], 20, message="handover")
        handover = time.monotonic() - killed_at
        assert handover <= 4.0 + 2.0, f"handover took {handover:.1f}s, lease is 4s"
        lease = cluster.get("lease", "candidates", "-n", namespace)
        assert lease["spec"]["holderIdentity"] == other
        assert lease["spec"]["leaseTransitions"] >= 1
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


class CountingReconciler:
    def __init__(self) -> None:
        self.seen: set[str] = set()

    def reconcile(self, key: str) -> Result | None:
        self.seen.add(key)
        return None


def test_metrics_endpoint_shows_workqueue_and_rest_series(cluster: Cluster, namespace: str) -> None:
    metrics = ControllerMetrics()
    rest = RESTClient(load_config(str(cluster.kubeconfig)), metrics=metrics)
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        default_controller_rate_limiter(),
        name="configmaps",
        metrics_provider=PrometheusWorkqueueMetricsProvider(metrics.registry),
    )
    reconciler = CountingReconciler()
    ctrl = Controller("configmaps", reconciler, queue, threadiness=2, metrics=metrics)
    factory = SharedInformerFactory(rest, namespace=namespace)
    informer = factory.informer_for(CONFIGMAPS)
    informer.add_event_handler(
        FuncHandler(add=lambda o, i: ctrl.enqueue(f"{namespace}/{o['metadata']['name']}"))
    )
    stop = threading.Event()
    server = MetricsServer("127.0.0.1:0", metrics.registry, ready=informer.has_synced).start()
    try:
        create_many(rest, namespace, [f"m-{i}" for i in range(5)])
        factory.start(stop)
        ctrl.run(lambda t: all(factory.wait_for_cache_sync(t).values()))
        wait_until(lambda: len(reconciler.seen) >= 5, 30, message="reconciles")
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/readyz", timeout=5) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as resp:
            text = resp.read().decode()

        def value(prefix: str) -> float:
            return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))

        assert value('workqueue_adds_total{name="configmaps"}') >= 5
        assert value('workqueue_work_duration_seconds_count{name="configmaps"}') >= 5
        assert value('rest_client_requests_total{code="201",resource="configmaps",verb="create"}') == 5
        assert value('rest_client_requests_total{code="200",resource="configmaps",verb="list"}') >= 1
        assert value('controller_reconcile_total{controller="configmaps",result="success"}') >= 5
    finally:
        stop.set()
        ctrl.shutdown()
        server.shutdown()
