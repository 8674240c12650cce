"""The REST layer and caches against the real API server: what the server really sends on delete,
how often it sends bookmarks to an idle watch, and informers started after the factory's first
start."""

from __future__ import annotations

import threading
import time
from typing import Any

from testbed import wait_until

from controller.cache import SharedInformerFactory
from controller.cache.informer import FuncHandler
from controller.rest import RESTClient
from controller.rest.client import WATCH_READ_TIMEOUT
from controller.rest.resources import CONFIGMAPS, LEASES


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "1"}}


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
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {}}
    rest.create(LEASES, lease, namespace)
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


def test_an_idle_watch_gets_a_bookmark_well_within_the_read_timeout(rest: RESTClient, namespace: str) -> None:
    """The client's watch read timeout (2 min) relies on kube-apiserver bookmarking every watch
    about once a minute; a quiet namespace must still get one well before the timeout."""
    rv = rest.list(CONFIGMAPS, namespace)["metadata"]["resourceVersion"]
    stream = rest.watch(CONFIGMAPS, namespace, resource_version=rv, timeout_seconds=600)
    started = time.monotonic()
    first_bookmark = None
    try:
        for event in stream:
            assert event.type == "BOOKMARK"  # nothing else happens in this namespace
            first_bookmark = time.monotonic() - started
            break
    finally:
        stream.stop()
    assert first_bookmark is not None
    assert first_bookmark < WATCH_READ_TIMEOUT * 0.75
