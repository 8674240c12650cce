"""OptionalInformers: caches for APIs that may be served only later (fed directly, no API server)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from testbed import wait_until

from controller.cache import OptionalInformers, SharedInformerFactory
from controller.cache.informer import FuncHandler
from controller.errors import TransientError
from controller.meta import Resource
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.config import ClusterConfig

WIDGETS = Resource("example.com", "v1", "widgets", "Widget")


def widget(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}}


@pytest.fixture
def factory() -> SharedInformerFactory:
    cfg = ClusterConfig(host="http://127.0.0.1:9")  # nothing listens: a started reflector only backs off
    return SharedInformerFactory(RESTClient(cfg, metrics=ControllerMetrics()), namespace="ns")


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    """Stops the informers a test started, and waits for their threads: a reflector still backing
    off would log its failed list into whichever test runs next (seen: a flag test's stdout)."""
    before = set(threading.enumerate())
    event = threading.Event()
    yield event
    event.set()
    for thread in set(threading.enumerate()) - before:
        thread.join(10)
        assert not thread.is_alive(), f"{thread.name} outlived its test"


class Served:
    """A discovery check the test flips."""

    def __init__(self) -> None:
        self.served: set[str] = set()

    def __call__(self, group_version: str) -> bool:
        return group_version in self.served


def test_an_api_not_served_has_no_cache_and_starts_nothing(
    factory: SharedInformerFactory, stop: threading.Event
) -> None:
    informers = OptionalInformers(factory, Served())
    informers.start(stop)
    assert informers.lister(WIDGETS) is None
    assert factory.wait_for_cache_sync(0) == {}  # no informer was started


def test_before_start_a_cache_is_a_transient_error(factory: SharedInformerFactory) -> None:
    served = Served()
    served.served.add(WIDGETS.api_version)
    with pytest.raises(TransientError, match="widgets"):
        OptionalInformers(factory, served).lister(WIDGETS)


def test_once_served_the_informer_starts_with_its_handlers_and_serves_reads(
    factory: SharedInformerFactory, stop: threading.Event
) -> None:
    served = Served()
    informers = OptionalInformers(factory, served)
    seen: list[str] = []
    informers.add_event_handler(
        WIDGETS, FuncHandler(add=lambda o, _: seen.append(o["metadata"]["name"])), label_selector="app"
    )
    informers.start(stop)
    assert informers.lister(WIDGETS, label_selector="app") is None

    served.served.add(WIDGETS.api_version)  # the CRD is installed
    # stand in for the reflector's first list (the shared informer is the one the factory hands out)
    factory.informer_for(WIDGETS, label_selector="app").replace([widget("a")], "1")
    cache = informers.lister(WIDGETS, label_selector="app")
    assert cache is not None and cache.get("a", "ns") is not None
    assert factory.wait_for_cache_sync(5) == {"widgets.example.com": True}  # requested and started
    # the handler registered beforehand got the cache
    wait_until(lambda: seen == ["a"], message="the earlier handler to see a")

    late: list[str] = []
    informers.add_event_handler(
        WIDGETS, FuncHandler(add=lambda o, _: late.append(o["metadata"]["name"])), label_selector="app"
    )
    factory.informer_for(WIDGETS, label_selector="app").add(widget("b"))
    assert informers.lister(WIDGETS, label_selector="app") is not None
    wait_until(
        lambda: sorted(late) == ["a", "b"] and seen == ["a", "b"], message="both handlers to see a and b"
    )

    served.served.clear()  # the CRD is removed again
    assert informers.lister(WIDGETS, label_selector="app") is None


def test_a_cache_that_does_not_sync_in_time_is_a_transient_error(
    factory: SharedInformerFactory, stop: threading.Event
) -> None:
    served = Served()
    served.served.add(WIDGETS.api_version)
    informers = OptionalInformers(factory, served, sync_timeout=0.2)
    informers.start(stop)
    with pytest.raises(TransientError, match="not synced"):
        informers.lister(WIDGETS)
