"""EventRecorder: core/v1 Events about our objects, as `kubectl describe` shows them.

Like client-go's recorder it aggregates: the same (object, type, reason, message) within
`dedupe_window` seconds bumps `count` and `lastTimestamp` of the existing Event instead of
creating another. Recording never raises and never blocks a reconcile on the API: events are
written by one background thread from a bounded queue (dropped, and counted, when full).
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Any

import structlog

from controller.api import format_time
from controller.clock import utc_now
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import EVENTS

log = structlog.get_logger("events")

NORMAL = "Normal"
WARNING = "Warning"


def _now() -> str:
    return format_time(utc_now())


class EventRecorder:
    def __init__(
        self,
        client: RESTClient,
        component: str = "torchrun-controller",
        dedupe_window: float = 600.0,
        max_pending: int = 1000,
    ) -> None:
        self.client = client
        self.component = component
        self.dedupe_window = dedupe_window
        self._queue: queue.Queue[tuple[dict[str, Any], str, str, str] | None] = queue.Queue(max_pending)
        self._recent: dict[tuple[str, str, str, str], tuple[float, dict[str, Any]]] = {}
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._thread.start()

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        ref = {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"].get("namespace") or "default",
            "uid": obj["metadata"].get("uid", ""),
            "resourceVersion": obj["metadata"].get("resourceVersion", ""),
        }
        try:
            self._queue.put_nowait((ref, type_, reason, message[:1024]))
        except queue.Full:
            self.dropped += 1

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every queued event is written (for tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)

    def shutdown(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(5)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.task_done()
                return
            ref, type_, reason, message = item
            try:
                self._write(ref, type_, reason, message)
            except Exception as exc:  # best effort: an event must never take the controller down
                key = f"{ref['namespace']}/{ref['name']}"
                log.warning("writing event failed", key=key, reason=reason, error=str(exc))
            finally:
                self._queue.task_done()

    def _write(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        key = (ref["uid"], type_, reason, message)
        now = time.monotonic()
        seen = self._recent.get(key)
        ns = ref["namespace"]
        if seen is not None and now - seen[0] < self.dedupe_window:
            count = int(seen[1].get("count", 1)) + 1
            patch = {"count": count, "lastTimestamp": _now()}
            try:
                updated = self.client.patch(EVENTS, seen[1]["metadata"]["name"], patch, ns)
                self._recent[key] = (now, updated)
                return
            except ApiError as exc:
                if not exc.not_found:
                    raise
        ts = _now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref['name']}.{secrets.token_hex(8)}", "namespace": ns},
            "involvedObject": ref,
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        created = self.client.create(EVENTS, body, ns)
        self._recent[key] = (now, created)
        if len(self._recent) > 4096:  # forget the oldest half
            for k in sorted(self._recent, key=lambda k: self._recent[k][0])[:2048]:
                del self._recent[k]
