"""SharedInformerFactory: at most one informer per (resource, namespace, label selector).

Controllers ask the factory for informers while they are built; `start()` runs every informer
requested so far (and is safe to call again for informers added later); `wait_for_cache_sync()`
blocks until each has synced or the timeout passes, and reports which did.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from controller.cache.informer import SharedIndexInformer, Transform
from controller.cache.lister import Lister
from controller.cache.store import IndexFunc
from controller.cache.transforms import strip_managed_fields
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.resources import Resource

_Key = tuple[Resource, str | None, str | None]


class SharedInformerFactory:
    def __init__(
        self,
        client: RESTClient,
        *,
        namespace: str | None = None,
        resync_period: float = 0.0,
        metrics: ControllerMetrics | None = None,
        transform: Transform | None = strip_managed_fields,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.resync_period = resync_period
        self.metrics = metrics or client.metrics
        self.transform = transform
        self._informers: dict[_Key, SharedIndexInformer] = {}
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None

    def informer_for(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        transform: Transform | None = None,
    ) -> SharedIndexInformer:
        """The shared informer for this resource; extra indexers are added to it."""
        ns = self.namespace if resource.namespaced else None
        key = (resource, ns, label_selector)
        with self._lock:
            informer = self._informers.get(key)
            if informer is None:
                informer = SharedIndexInformer(
                    self.client,
                    resource,
                    namespace=ns,
                    label_selector=label_selector,
                    resync_period=self.resync_period,
                    metrics=self.metrics,
                    transform=transform or self.transform,
                )
                self._informers[key] = informer
                if self._stop is not None:
                    informer.run(self._stop)
        if indexers:
            missing = {k: v for k, v in indexers.items() if k not in informer.indexer.index_names()}
            if missing:
                informer.add_indexers(missing)
        return informer

    def lister_for(self, resource: Resource, *, label_selector: str | None = None) -> Lister:
        return Lister(self.informer_for(resource, label_selector=label_selector).indexer)

    def start(self, stop: threading.Event) -> None:
        with self._lock:
            self._stop = stop
            informers = list(self._informers.values())
        for informer in informers:
            informer.run(stop)

    def wait_for_cache_sync(self, timeout: float | None = None) -> dict[str, bool]:
        with self._lock:
            informers = list(self._informers.values())
        return {inf.resource.key: inf.wait_for_sync(timeout) for inf in informers}

    def shutdown(self) -> None:
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            informer.shutdown()
