"""Informers for APIs that may not be served yet (client-go's pattern for optional CRDs).

A scheduler's CRDs (PodGroups, Kueue Workloads, KAI Queues) may be installed after the
controller starts, or never. An informer for a resource the API server does not serve only
fails and backs off, and waiting for its cache would hold start-up forever, so such informers
are not requested up front. `OptionalInformers.lister(resource)` instead:

- returns None while discovery says the resource's group/version is not served (the caller
  treats that as "not installed"), and never requests an informer then;
- once it is served, requests the shared informer from the factory on first need (with the
  event handlers registered for it beforehand, see `add_event_handler`), starts it with
  `factory.start` (which starts only informers not running yet) and waits for its first list,
  at most `sync_timeout` seconds; a cache that has not synced by then is a `TransientError`
  (the reconcile retries with backoff), never a half-filled Lister;
- afterwards returns a Lister on that cache at the cost of one discovery check (the check is
  the caller's, e.g. a cached `Discovery.served`).

`start(stop)` hands over the stop event the informers run until (known only when the process
starts leading); before it, `lister` raises `TransientError`. An informer, once started, keeps
running for the process's lifetime: if the CRD is removed, `lister` returns None again and the
reflector backs off until the CRD is back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from controller.cache.factory import SharedInformerFactory
from controller.cache.informer import EventHandler, SharedIndexInformer
from controller.cache.lister import Lister
from controller.errors import TransientError
from controller.meta import Resource

SYNC_TIMEOUT = 10.0  # seconds a reconcile may wait for an optional cache's first list

_Key = tuple[Resource, str | None]


class OptionalInformers:
    """Shared informers, started on first need, for resources whose API may come later."""

    def __init__(
        self,
        factory: SharedInformerFactory,
        served: Callable[[str], bool],
        *,
        sync_timeout: float = SYNC_TIMEOUT,
    ) -> None:
        self.factory = factory
        self.served = served
        self.sync_timeout = sync_timeout
        self._handlers: dict[_Key, list[EventHandler]] = {}
        self._informers: dict[_Key, SharedIndexInformer] = {}
        self._stop: threading.Event | None = None
        self._lock = threading.Lock()

    def add_event_handler(
        self, resource: Resource, handler: EventHandler, *, label_selector: str | None = None
    ) -> None:
        """Register `handler` on the informer for (resource, selector), now if it runs already,
        else when `lister` first starts it."""
        key = (resource, label_selector)
        with self._lock:
            self._handlers.setdefault(key, []).append(handler)
            informer = self._informers.get(key)
        if informer is not None:
            informer.add_event_handler(handler)  # a late handler first gets the cache as adds

    def start(self, stop: threading.Event) -> None:
        """Informers started from now on run until `stop` is set."""
        with self._lock:
            self._stop = stop

    def lister(self, resource: Resource, *, label_selector: str | None = None) -> Lister | None:
        """A Lister on the cache of `resource`, or None while its API is not served (module doc)."""
        if not self.served(resource.api_version):
            return None
        informer = self._informer(resource, label_selector)
        if not informer.has_synced() and not informer.wait_for_sync(self.sync_timeout):
            raise TransientError(f"the cache of {resource.key} has not synced yet")
        return Lister(informer.indexer)

    def _informer(self, resource: Resource, label_selector: str | None) -> SharedIndexInformer:
        key = (resource, label_selector)
        with self._lock:
            informer = self._informers.get(key)
            if informer is not None:
                return informer
            if self._stop is None:
                raise TransientError(f"the cache of {resource.key} cannot start before the informers do")
            informer = self.factory.informer_for(resource, label_selector=label_selector)
            for handler in self._handlers.get(key, ()):
                informer.add_event_handler(handler)
            self._informers[key] = informer
            stop = self._stop
        self.factory.start(stop)
        return informer
