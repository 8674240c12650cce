"""The REST layer and caches against the real API server: what the server sends on delete, an idle
watch outliving the client's read timeout, and informers started after the factory's first start."""

from __future__ import annotations

import threading
import time
from typing import Any

from testbed import Cluster, wait_until

from controller.cache import SharedInformerFactory
from controller.cache.informer import FuncHandler
from controller.metrics.registry import ControllerMetrics
from controller.rest import RESTClient, load_config
from controller.rest.resources import CONFIGMAPS, LEASES


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "1"}}


def lease(name: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": {}}


def test_delete_handler_gets_the_deleted_events_object(rest: RESTClient, namespace: str) -> None:
    factory = SharedInformerFactory(rest, namespace=namespace)
    informer = factory.informer_for(CONFIGMAPS)
    deleted: list[Any] = []
    informer.add_event_handler(FuncHandler(delete=deleted.append))
    stop = threading.Event()
    factory.start(stop)
    try:
        assert factory.wait_for_cache_sync(60) == {"configmaps": True}
        rest.create(CONFIGMAPS, configmap("x"), namespace)
        cached = wait_until(lambda: informer.get(f"{namespace}/x"), 30, message="x cached")
        rest.delete(CONFIGMAPS, "x", namespace)
        wait_until(lambda: deleted, 30, message="delete event")
        # the DELETED event carries the object at the deletion's resourceVersion: its final state,
        # newer than anything the cache held
        final = deleted[0]
        assert final["metadata"]["name"] == "x"
        assert int(final["metadata"]["resourceVersion"]) > int(cached["metadata"]["resourceVersion"])
    finally:
        stop.set()


def test_informers_requested_after_start_run_on_the_next_start(rest: RESTClient, namespace: str) -> None:
    rest.create(LEASES, lease("l"), namespace)
    factory = SharedInformerFactory(rest, namespace=namespace)
    factory.informer_for(CONFIGMAPS)
    stop = threading.Event()
    factory.start(stop)
    try:
        assert factory.wait_for_cache_sync(60) == {"configmaps": True}
        leases = factory.informer_for(LEASES)  # e.g. for a CRD that discovery found later
        time.sleep(1)
        assert not leases.has_synced()  # requesting an informer does not start it
        assert factory.wait_for_cache_sync(60) == {"configmaps": True}  # nor waits for it
        factory.start(stop)
        assert factory.wait_for_cache_sync(60) == {"configmaps": True, "leases.coordination.k8s.io": True}
        assert leases.get(f"{namespace}/l") is not None
        assert (
            factory.informer_for(CONFIGMAPS)
            .reflector.metrics.informer_lists.labels("configmaps")
            ._value.get()
            == 1
        )  # the second start left the running informer alone
    finally:
        stop.set()


def test_an_idle_informer_outlives_the_watch_read_timeout(cluster: Cluster, namespace: str) -> None:
    """An idle resource type gets no bookmarks (kube-apiserver bookmarks a watch only once its watch
    cache moves past the watch's resourceVersion), so silence longer than the read timeout is
    normal: the watch is resumed at once, never relisted or backed off, and changes still arrive."""
    rest = RESTClient(load_config(str(cluster.kubeconfig)), metrics=ControllerMetrics(), watch_read_timeout=2)
    factory = SharedInformerFactory(rest, namespace=namespace)
    informer = factory.informer_for(LEASES)  # nothing changes here, and bookmarks come once a minute
    stop = threading.Event()
    factory.start(stop)
    try:
        assert factory.wait_for_cache_sync(60) == {"leases.coordination.k8s.io": True}
        time.sleep(9)  # four read timeouts or more
        metrics = rest.metrics
        # resumed at once after each silence (backing off 0.8 s, 1.6 s, ... would allow only 3)
        assert metrics.informer_watches.labels(LEASES.key)._value.get() >= 4
        assert metrics.informer_lists.labels(LEASES.key)._value.get() == 1
        rest.create(LEASES, lease("l"), namespace)
        wait_until(lambda: informer.get(f"{namespace}/l"), 5, message="the change reaches the cache")
    finally:
        stop.set()
