"""SharedInformerFactory: at most one informer per (resource, namespace, label selector).

Controllers ask the factory for informers while they are built. Asking again for the same
(resource, selector) returns the same informer, and may add indexers; it must agree with the
first request on the transform (or pass none) and on any index it names, else `ValueError`:
one caller must never silently get a cache shaped for another.

`start()` runs every informer requested so far that is not running yet; as client-go's
`factory.Start`, it may be called again to start informers requested later (e.g. for a CRD once
discovery shows its API) — requesting one never starts it by itself. `wait_for_cache_sync()`
covers the started informers: it blocks until each has synced or the timeout passes, and reports
which did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from controller.cache.informer import SharedIndexInformer, Transform
from controller.cache.lister import Lister
from controller.cache.store import DEFAULT_INDEXERS, IndexFunc
from controller.cache.transforms import strip_managed_fields
from controller.meta import Resource
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient

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
        self._index_funcs: dict[_Key, dict[str, IndexFunc]] = {}
        self._started: set[_Key] = set()
        self._lock = threading.Lock()

    def informer_for(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        transform: Transform | None = None,
    ) -> SharedIndexInformer:
        """The shared informer for this resource and selector, created on first request; a later
        request may add indexers, and conflicts with the first raise ValueError (module doc)."""
        ns = self.namespace if resource.namespaced else None
        key = (resource, ns, label_selector)
        what = f"{resource.key}" + (f" (labelSelector {label_selector!r})" if label_selector else "")
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
                self._index_funcs[key] = dict(DEFAULT_INDEXERS)
            elif transform is not None and transform is not informer.transform:
                raise ValueError(
                    f"the shared informer for {what} already caches with transform "
                    f"{_name(informer.transform)}, not {_name(transform)}"
                )
            known = self._index_funcs[key]
            for name, fn in (indexers or {}).items():
                if known.get(name) is fn:
                    continue
                if name in known or name in informer.indexer.index_names():
                    raise ValueError(f"the shared informer for {what} already has another index {name!r}")
                informer.add_indexers({name: fn})
                known[name] = fn
        return informer

    def lister_for(self, resource: Resource, *, label_selector: str | None = None) -> Lister:
        return Lister(self.informer_for(resource, label_selector=label_selector).indexer)

    def start(self, stop: threading.Event) -> None:
        """Run every requested informer not running yet; call again after requesting more."""
        with self._lock:
            new = [(key, inf) for key, inf in self._informers.items() if key not in self._started]
            self._started.update(key for key, _ in new)
        for _, informer in new:
            informer.run(stop)

    def wait_for_cache_sync(self, timeout: float | None = None) -> dict[str, bool]:
        """Whether each started informer synced within `timeout` (one deadline for all), by
        resource; a resource cached under several selectors is synced when all of them are."""
        with self._lock:
            informers = [inf for key, inf in self._informers.items() if key in self._started]
        deadline = None if timeout is None else time.monotonic() + timeout
        synced: dict[str, bool] = {}
        for inf in informers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            synced[inf.resource.key] = inf.wait_for_sync(left) and synced.get(inf.resource.key, True)
        return synced

    def shutdown(self) -> None:
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            informer.shutdown()


def _name(transform: Transform | None) -> str:
    return "none" if transform is None else getattr(transform, "__qualname__", repr(transform))
