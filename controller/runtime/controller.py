"""Controller: sample-controller's loop with a pool of worker threads.

Each worker: `key = queue.get()` → `reconcile(key)` → on success `forget` (and `add_after` if the
result asks for a timed requeue; `add_rate_limited` without `forget` if it asks for a backed-off
one), on `PermanentError` `forget` (the reconciler has already reported it
in a condition), on any other exception `add_rate_limited` → always `done`. The queue guarantees a
key is never reconciled by two workers at once. An exception never kills a worker; it is logged
with the key, counted, and the key retried with backoff. Every line logged during a reconcile, by
any module, carries the controller's name and the key (structlog context variables, merged by
`controller.log`): a decision is never logged without the object it is about. `run()` starts
workers only after the given caches have synced. `shutdown()` stops handing out keys at once —
keys still queued are left for the next leader — lets the reconciles in flight finish, and joins
the workers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from controller.errors import PermanentError, TransientError
from controller.metrics.registry import ControllerMetrics
from controller.workqueue import RateLimitingQueue

log = structlog.get_logger("controller")


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for besides success (controller-runtime's `Result`).

    `requeue_after`: come back after exactly that many seconds (a timer: TTL, deadline).
    `requeue`: come back with the rate limiter's per-key backoff — for a state only a human or
    another controller can change and that no watch event announces (a name taken by a foreign
    object); the backoff grows while the state persists and resets once a pass ends without it.
    """

    requeue_after: float | None = None
    requeue: bool = False


class Reconciler(Protocol):
    def reconcile(self, key: str) -> Result | None: ...


class Controller:
    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        queue: RateLimitingQueue[str],
        *,
        threadiness: int = 2,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.name = name
        self.reconciler = reconciler
        self.queue = queue
        self.threadiness = threadiness
        self.metrics = metrics or ControllerMetrics()
        self._workers: list[threading.Thread] = []
        self._stopping = threading.Event()

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def enqueue_after(self, key: str, seconds: float) -> None:
        self.queue.add_after(key, seconds)

    def run(self, cache_synced: Callable[[float], bool] | None = None, timeout: float = 120.0) -> None:
        """Wait for caches, then start the workers (returns at once)."""
        if cache_synced is not None and not cache_synced(timeout):
            raise RuntimeError(f"{self.name}: caches did not sync within {timeout}s")
        for i in range(self.threadiness):
            t = threading.Thread(target=self._worker, name=f"{self.name}-worker-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        log.info("workers started", controller=self.name, workers=self.threadiness)

    def _worker(self) -> None:
        while self.process_next_work_item():
            pass

    def process_next_work_item(self) -> bool:
        key, shutdown = self.queue.get()
        if shutdown or key is None:
            return False
        if self._stopping.is_set():
            # the queue still hands out what it holds after shutdown (as client-go's does); a
            # stopping controller takes no new key — whoever leads next reconciles it
            self.queue.done(key)
            return False
        active = self.metrics.active_workers.labels(self.name)
        active.inc()
        started = time.perf_counter()
        try:
            with structlog.contextvars.bound_contextvars(controller=self.name, key=key):
                self._reconcile(key)
        finally:
            self.metrics.reconcile_duration.labels(self.name).observe(time.perf_counter() - started)
            active.dec()
            self.queue.done(key)
        return True

    def _reconcile(self, key: str) -> None:
        try:
            result = self.reconciler.reconcile(key)
        except PermanentError as exc:
            self.queue.forget(key)
            self.metrics.reconcile_total.labels(self.name, "permanent").inc()
            log.info(
                "reconcile gave up: permanent error",
                controller=self.name,
                key=key,
                reason=exc.reason,
                message=exc.message,
            )
            return
        except TransientError as exc:
            self.metrics.reconcile_total.labels(self.name, "requeue").inc()
            if exc.requeue_after is not None:
                self.queue.forget(key)
                self.queue.add_after(key, exc.requeue_after)
            else:
                self.queue.add_rate_limited(key)
            log.info("reconcile will retry", controller=self.name, key=key, why=str(exc))
            return
        except Exception as exc:
            self.metrics.reconcile_total.labels(self.name, "error").inc()
            self.metrics.reconcile_errors.labels(self.name).inc()
            self.queue.add_rate_limited(key)
            log.error(
                "reconcile failed",
                controller=self.name,
                key=key,
                error=repr(exc),
                retries=self.queue.num_requeues(key),
                exc_info=True,
            )
            return
        if result is not None and result.requeue:
            self.queue.add_rate_limited(key)
            self.metrics.reconcile_total.labels(self.name, "requeue").inc()
            return
        self.queue.forget(key)
        if result is not None and result.requeue_after is not None:
            self.queue.add_after(key, max(result.requeue_after, 0.0))
            self.metrics.reconcile_total.labels(self.name, "requeue").inc()
        else:
            self.metrics.reconcile_total.labels(self.name, "success").inc()
        log.debug("reconciled", controller=self.name, key=key)

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop taking new keys (even queued ones), let workers finish what they hold, join them."""
        self._stopping.set()
        self.queue.shut_down_with_drain()
        for t in self._workers:
            t.join(timeout)
