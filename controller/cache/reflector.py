"""Reflector: keeps a sink in step with the API server by list-then-watch (client-go's Reflector).

- Lists in pages (`limit`/`continue`) and hands the full list to `sink.replace` with its
  resourceVersion; a continue token that expired mid-list restarts the list.
- Watches from the last resourceVersion with bookmarks and a server-side timeout (5–10 min,
  randomised like client-go so watches do not all restart together). A watch connection silent
  for the client's read timeout (`RESTClient.watch_read_timeout`, 2 min) is dropped.
- A watch that ends normally, or was dropped for silence, is resumed at once from the last
  resourceVersion, with no relist: an idle resource type can go minutes without a bookmark, and
  a dead connection shows up as that resumed watch failing (then the backoff below applies).
- 410 Gone (from the watch request or an ERROR event) → backoff, then relist.
- Any other list or watch error → backoff, then the same step again: a failed list lists again,
  a failed watch watches again from the last resourceVersion (a 410 there leads to a relist).
- A watch that closes almost at once with no events counts as an error, so a misbehaving server
  cannot make us spin.

Every retry after a failure waits for the backoff (`controller.backoff`: 800 ms doubling to
30 s, jitter up to 1x), including the relist after a 410: client-go runs each ListAndWatch under
`delayHandler.Until` (tools/cache/reflector.go `RunWithContext`), so it never relists at once
either. After two quiet minutes the delay is back at 0.8-1.6 s, so a healthy watch that gets a
410 relists within about a second, while a server answering 410 or errors to everything is asked
at most every 30-60 s. Two deliberate differences from client-go: its backoff manager resets
every 2 minutes even while failures continue (ours only after 2 minutes without one), and it
relists after most watch errors (a rewatch from the last resourceVersion is as fresh and
cheaper; a 410 there still forces the relist). The clock is injectable so tests drive the delays.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from controller.backoff import Backoff
from controller.clock import REAL_CLOCK, Clock
from controller.meta import Resource
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient, WatchStream
from controller.rest.errors import ApiError, status_error

log = structlog.get_logger("reflector")

_SHORT_WATCH = 1.0  # seconds: a watch closing this fast with no event is an error
_STOP_POLL = 1.0  # seconds: a backoff wait notices a bare `stop` event at least this often


class ReflectorSink(Protocol):
    def replace(self, objs: list[Any], resource_version: str) -> None: ...
    def add(self, obj: dict[str, Any]) -> None: ...
    def update(self, obj: dict[str, Any]) -> None: ...
    def delete(self, obj: dict[str, Any]) -> None: ...


class _RelistError(Exception):
    """The watch cannot resume from our resourceVersion: relist."""


class Reflector:
    def __init__(
        self,
        client: RESTClient,
        resource: Resource,
        sink: ReflectorSink,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        min_watch_timeout: int = 300,
        metrics: ControllerMetrics | None = None,
        backoff: Backoff | None = None,
        prepare: Callable[[dict[str, Any]], Any] | None = None,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        self.client = client
        self.resource = resource
        self.sink = sink
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.min_watch_timeout = min_watch_timeout
        self.metrics = metrics or client.metrics
        self._clock = clock
        self.backoff = backoff or Backoff(clock=clock)
        # applied to each listed item as its page arrives, so a big list never holds every raw
        # object at once (the informer passes its transform-and-freeze step)
        self.prepare = prepare
        self.last_sync_resource_version = ""
        self._watch: WatchStream | None = None
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # ends a backoff wait early on stop()

    # -- list ---------------------------------------------------------------------------------

    def list(self) -> None:
        """One full, paginated list handed to the sink."""
        self.metrics.informer_lists.labels(self.resource.key).inc()
        while True:
            items: list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    page = self.client.list(
                        self.resource,
                        self.namespace,
                        label_selector=self.label_selector,
                        field_selector=self.field_selector,
                        limit=self.page_size,
                        continue_token=token,
                    )
                    meta = page.get("metadata") or {}
                    raw = page.pop("items", None) or []
                    items.extend(map(self.prepare, raw) if self.prepare else raw)
                    del page, raw
                    token = meta.get("continue") or None
                    if not token:
                        break
            except ApiError as exc:
                if exc.gone and token:
                    log.info("continue token expired; listing again", resource=self.resource.key)
                    continue
                raise
            self.sink.replace(items, meta.get("resourceVersion", ""))
            self.last_sync_resource_version = meta.get("resourceVersion", "")
            return

    # -- watch --------------------------------------------------------------------------------

    def watch_once(self, stop: threading.Event) -> None:
        """One watch from the last resourceVersion until the server ends it or `stop` is set."""
        timeout = int(self.min_watch_timeout * (1 + random.random()))
        try:
            stream = self.client.watch(
                self.resource,
                self.namespace,
                resource_version=self.last_sync_resource_version,
                timeout_seconds=timeout,
                allow_bookmarks=True,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
            )
        except ApiError as exc:
            if exc.gone:
                raise _RelistError("watch: resourceVersion too old") from exc
            raise
        self.metrics.informer_watches.labels(self.resource.key).inc()
        with self._lock:
            self._watch = stream
        if stop.is_set():
            stream.stop()
        started, events = self._clock.now(), 0
        try:
            for event in stream:
                events += 1
                self._handle(event.type, event.object)
        finally:
            with self._lock:
                self._watch = None
        if stream.timed_out:
            log.debug("watch silent; resuming", resource=self.resource.key, events=events)
        if events == 0 and self._clock.now() - started < _SHORT_WATCH and not stop.is_set():
            raise ConnectionError("very short watch: closed at once with no events")

    def _handle(self, kind: str, obj: dict[str, Any]) -> None:
        self.metrics.informer_events.labels(self.resource.key, kind).inc()
        if kind == "ERROR":
            err = status_error(obj)
            if err.gone:
                raise _RelistError(f"watch event: {err.message}")
            raise err
        rv = (obj.get("metadata") or {}).get("resourceVersion", "")
        if kind == "ADDED":
            self.sink.add(obj)
        elif kind == "MODIFIED":
            self.sink.update(obj)
        elif kind == "DELETED":
            self.sink.delete(obj)
        elif kind != "BOOKMARK":
            log.warning("unknown watch event type", type=kind, resource=self.resource.key)
            return
        if rv:
            self.last_sync_resource_version = rv

    # -- run loop -----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """List and watch until `stop` is set. Never raises."""
        need_list = True
        while not stop.is_set():
            try:
                if need_list:
                    self.list()
                    need_list = False
                self.watch_once(stop)
                continue  # the server ended the watch: resume at once
            except _RelistError as exc:
                self.metrics.informer_relists.labels(self.resource.key, "gone").inc()
                need_list = True
                delay = self.backoff.next()
                log.info("relisting", resource=self.resource.key, why=str(exc), retry_in=round(delay, 2))
            except Exception as exc:  # any failure: back off, then resume
                delay = self.backoff.next()
                log.warning(
                    "list failed" if need_list else "watch failed",
                    resource=self.resource.key,
                    error=str(exc),
                    retry_in=round(delay, 2),
                )
            self._sleep(stop, delay)

    def _sleep(self, stop: threading.Event, seconds: float) -> None:
        """Wait `seconds` on the reflector's clock, or less if `stop` is set."""
        deadline = self._clock.now() + seconds
        with self._wake:
            while not stop.is_set():
                remaining = deadline - self._clock.now()
                if remaining <= 0:
                    return
                self._clock.wait(self._wake, min(remaining, _STOP_POLL))

    def stop(self) -> None:
        """Interrupt an open watch or a backoff wait (the run loop then sees `stop` set and returns)."""
        with self._lock:
            if self._watch is not None:
                self._watch.stop()
            self._wake.notify_all()
