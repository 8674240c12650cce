"""SharedIndexInformer: one reflector, one indexer, many handlers (client-go's shared_informer.go).

The reflector's events update the indexer first, then are handed to every registered handler.
Each handler has its own unbounded buffer and thread (client-go's processorListener), so a slow
handler delays only itself, and each sees events in order. A delete handler gets the DELETED
event's object, the final state; relist diffs produce updates for objects still present and
`DeletedFinalStateUnknown` tombstones (with the last cached state) for objects that vanished while
the watch was down. A handler added after start first receives synthetic adds of the cache.
Resync replays the cache to handlers as `on_update(obj, obj)` every resync period, with no API
call. Objects are transformed (default: drop `managedFields`) and frozen before caching.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from controller.cache.frozen import FrozenDict, freeze
from controller.cache.reflector import Reflector
from controller.cache.store import Indexer, IndexFunc
from controller.cache.transforms import strip_managed_fields
from controller.clock import REAL_CLOCK, Clock
from controller.meta import Obj, Resource
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient

log = structlog.get_logger("informer")

Transform = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class DeletedFinalStateUnknown:
    """An object deleted while we were not watching: its last known state."""

    key: str
    obj: Obj


def unwrap_tombstone(obj: Obj | DeletedFinalStateUnknown) -> Obj:
    """The deleted object itself, or a tombstone's last known state (client-go handlers' idiom)."""
    return obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj


class EventHandler(Protocol):
    def on_add(self, obj: Obj, is_initial: bool) -> None: ...
    def on_update(self, old: Obj, new: Obj) -> None: ...
    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None: ...


@dataclass
class FuncHandler:
    """An EventHandler from plain functions; missing ones do nothing."""

    add: Callable[[Obj, bool], None] | None = None
    update: Callable[[Obj, Obj], None] | None = None
    delete: Callable[[Obj | DeletedFinalStateUnknown], None] | None = None

    def on_add(self, obj: Obj, is_initial: bool) -> None:
        if self.add:
            self.add(obj, is_initial)

    def on_update(self, old: Obj, new: Obj) -> None:
        if self.update:
            self.update(old, new)

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        if self.delete:
            self.delete(obj)


_STOP = object()


class _Listener:
    """One handler's ordered, unbounded notification buffer and its delivery thread."""

    def __init__(self, handler: EventHandler, resync_period: float, name: str) -> None:
        self.handler = handler
        self.resync_period = resync_period
        self.next_resync = 0.0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._initial_pending = 0
        self._initial_done = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add_initial(self, objs: list[Obj]) -> None:
        with self._lock:
            self._initial_pending = len(objs)
        for obj in objs:
            self._queue.put(("initial", obj, None))
        if not objs:
            self._initial_done.set()

    def notify(self, kind: str, a: Any, b: Any = None) -> None:
        self._queue.put((kind, a, b))

    def has_synced(self) -> bool:
        return self._initial_done.is_set()

    def stop(self) -> None:
        self._queue.put(_STOP)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            kind, a, b = item
            try:
                if kind == "initial":
                    self.handler.on_add(a, True)
                elif kind == "add":
                    self.handler.on_add(a, False)
                elif kind == "update":
                    self.handler.on_update(a, b)
                else:
                    self.handler.on_delete(a)
            except Exception:
                log.exception("event handler raised", event=kind)
            finally:
                if kind == "initial":
                    with self._lock:
                        self._initial_pending -= 1
                        if self._initial_pending == 0:
                            self._initial_done.set()


class SharedIndexInformer:
    def __init__(
        self,
        client: RESTClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        resync_period: float = 0.0,
        transform: Transform | None = strip_managed_fields,
        metrics: ControllerMetrics | None = None,
        clock: Clock = REAL_CLOCK,
        page_size: int = 500,
    ) -> None:
        self.resource = resource
        self.indexer = Indexer()
        if indexers:
            self.indexer.add_indexers(indexers)
        self.transform = transform
        self.resync_period = resync_period
        self.metrics = metrics or client.metrics
        self._clock = clock
        self._listeners: list[_Listener] = []
        self._lock = threading.RLock()  # orders cache writes with listener registration
        self._synced = threading.Event()
        self._started = False
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.reflector = Reflector(
            client,
            resource,
            self,
            namespace=namespace,
            label_selector=label_selector,
            metrics=self.metrics,
            page_size=page_size,
            prepare=self._prepare,
            clock=clock,
        )

    # -- registration -------------------------------------------------------------------------

    def add_event_handler(self, handler: EventHandler, resync_period: float | None = None) -> _Listener:
        period = self.resync_period if resync_period is None else resync_period
        listener = _Listener(handler, period, self.resource.key)
        with self._lock:
            self._listeners.append(listener)
            listener.next_resync = self._clock.now() + period
            listener.start()
            if self._synced.is_set():
                listener.add_initial(self.indexer.list())
        return listener

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        self.indexer.add_indexers(indexers)

    # -- reflector sink -----------------------------------------------------------------------

    def _prepare(self, obj: dict[str, Any]) -> Obj:
        if self.transform is not None:
            obj = self.transform(obj)
        frozen: Obj = freeze(obj)
        return frozen

    def replace(self, objs: list[Any], resource_version: str) -> None:
        """A full list; the reflector has already prepared (transformed, frozen) each item."""
        new: list[Obj] = [o if isinstance(o, FrozenDict) else self._prepare(o) for o in objs]
        with self._lock:
            old = self.indexer.replace(new)
            if not self._synced.is_set():
                for lst in self._listeners:
                    lst.add_initial(new)
                self._synced.set()
            else:
                self._notify_diff(old, new)
            self.metrics.informer_store_size.labels(self.resource.key).set(len(new))

    def _notify_diff(self, old: dict[str, Obj], new: list[Obj]) -> None:
        """A relist: updates for survivors, adds for newcomers, tombstones for the vanished."""
        for obj in new:
            prev = old.pop(self.indexer.key(obj), None)
            if prev is None:
                self._notify("add", obj)
            else:
                self._notify("update", prev, obj)
        for key, gone in old.items():
            self._notify("delete", DeletedFinalStateUnknown(key, gone))

    def add(self, obj: dict[str, Any]) -> None:
        frozen = self._prepare(obj)
        with self._lock:
            old = self.indexer.add(frozen)
            if old is None:
                self._notify("add", frozen)
            else:
                self._notify("update", old, frozen)
            self.metrics.informer_store_size.labels(self.resource.key).set(len(self.indexer))

    update = add

    def delete(self, obj: dict[str, Any]) -> None:
        """A DELETED event. Handlers get the event's object, the final state (client-go's
        processDeltas), not the last cached one; a delete of an object that is not cached was
        already reported by a relist's tombstone, or never seen, so it is dropped as
        DeltaFIFO.Delete drops it."""
        frozen = self._prepare(obj)
        with self._lock:
            if self.indexer.delete(frozen) is not None:
                self._notify("delete", frozen)
            self.metrics.informer_store_size.labels(self.resource.key).set(len(self.indexer))

    def _notify(self, kind: str, a: Any, b: Any = None) -> None:
        for lst in self._listeners:
            lst.notify(kind, a, b)

    # -- lifecycle ----------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> None:
        """Start the reflector (and resync) threads; returns at once."""
        with self._lock:
            if self._started:
                return
            self._started = True
        if stop is not None:
            threading.Thread(target=self._watch_stop, args=(stop,), daemon=True).start()
        t = threading.Thread(
            target=self.reflector.run, args=(self._stop,), name=f"reflector-{self.resource.key}", daemon=True
        )
        t.start()
        self._threads.append(t)
        r = threading.Thread(target=self._resync_loop, name=f"resync-{self.resource.key}", daemon=True)
        r.start()
        self._threads.append(r)

    def _watch_stop(self, stop: threading.Event) -> None:
        stop.wait()
        self.shutdown()

    def _resync_loop(self) -> None:
        while not self._stop.wait(1.0 if self.resync_period <= 0 else min(1.0, self.resync_period)):
            if not self._synced.is_set():
                continue
            now = self._clock.now()
            due = [lst for lst in self._listeners if lst.resync_period > 0 and now >= lst.next_resync]
            if not due:
                continue
            with self._lock:
                objs = self.indexer.list()
                for lst in due:
                    for obj in objs:
                        lst.notify("update", obj, obj)
                    lst.next_resync = now + lst.resync_period

    def has_synced(self) -> bool:
        """The initial list is cached and every handler has processed it."""
        return self._synced.is_set() and all(lst.has_synced() for lst in self._listeners)

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        if not self._synced.wait(timeout):
            return False
        return all(lst._initial_done.wait(timeout) for lst in self._listeners)

    def shutdown(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.reflector.stop()
        for lst in self._listeners:
            lst.stop()
        for t in self._threads:
            t.join(timeout)
        for lst in self._listeners:
            lst.join(timeout)

    # -- convenience --------------------------------------------------------------------------

    def get(self, key: str) -> Obj | None:
        return self.indexer.get_by_key(key)

    def list(self) -> list[Obj]:
        return self.indexer.list()
