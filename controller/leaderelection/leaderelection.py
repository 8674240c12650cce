"""LeaderElector: at most one holder of a Lease at a time, with client-go's timing rules.

- A candidate tries every `retry_period` (jittered ×1.2) to acquire the Lease. It may take it
  when the Lease does not exist, is held by nobody, or its record has not changed for
  `lease_duration` as observed on *our* clock (never the holder's timestamps, so clock skew
  between machines does not matter).
- Writes carry the Lease's resourceVersion, so two candidates racing for it cannot both win.
- The leader renews every `retry_period`; if it cannot renew within `renew_deadline` it stops
  leading (`on_stopped_leading`) — before anyone else may take over (renew_deadline <
  lease_duration).
- `release()` on a clean shutdown empties the holder so a successor does not wait out the lease.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import structlog

from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import LEASES

log = structlog.get_logger("leaderelection")


def _micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaderElectionConfig:
    lease_name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    on_started_leading: Callable[[], None] = lambda: None
    on_stopped_leading: Callable[[], None] = lambda: None
    on_new_leader: Callable[[str], None] = field(default=lambda identity: None)

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period * 1.2:
            raise ValueError("need lease_duration > renew_deadline > 1.2 × retry_period")


class LeaderElector:
    def __init__(
        self, client: RESTClient, config: LeaderElectionConfig, metrics: ControllerMetrics | None = None
    ):
        self.client = client
        self.config = config
        self.metrics = metrics or client.metrics
        self._observed_record: dict[str, Any] | None = None
        self._observed_rv = ""
        self._observed_time = 0.0
        self._leading = threading.Event()
        self._leader = ""

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    @property
    def leader(self) -> str:
        return self._leader

    def run(self, stop: threading.Event) -> None:
        """Acquire, lead until the lease is lost or `stop` is set, then return."""
        if not self._acquire(stop):
            return
        self._leading.set()
        self.metrics.leader.labels(self.config.lease_name).set(1)
        log.info("became leader", lease=self.config.lease_name, identity=self.config.identity)
        threading.Thread(target=self.config.on_started_leading, name="leading", daemon=True).start()
        try:
            self._renew(stop)
        finally:
            self._leading.clear()
            self.metrics.leader.labels(self.config.lease_name).set(0)
            if stop.is_set():
                self.release()
            log.info("stopped leading", lease=self.config.lease_name, identity=self.config.identity)
            self.config.on_stopped_leading()

    def _acquire(self, stop: threading.Event) -> bool:
        while not stop.is_set():
            if self._try_acquire_or_renew():
                return True
            stop.wait(self.config.retry_period * (1 + 0.2 * random.random()))
        return False

    def _renew(self, stop: threading.Event) -> None:
        while not stop.is_set():
            deadline = time.monotonic() + self.config.renew_deadline
            while not self._try_acquire_or_renew():
                if time.monotonic() >= deadline or stop.is_set():
                    if not stop.is_set():
                        log.warning("failed to renew lease within the deadline", lease=self.config.lease_name)
                    return
                stop.wait(self.config.retry_period)
            stop.wait(self.config.retry_period)

    def _record(self, now: float, transitions: int, acquire_time: str | None) -> dict[str, Any]:
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": int(self.config.lease_duration),
            "acquireTime": acquire_time or _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }

    def _try_acquire_or_renew(self) -> bool:
        cfg = self.config
        now = time.time()
        try:
            lease = self.client.get(LEASES, cfg.lease_name, cfg.namespace)
        except ApiError as exc:
            if not exc.not_found:
                log.warning("reading lease failed", error=str(exc))
                return False
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.lease_name, "namespace": cfg.namespace},
                "spec": self._record(now, 0, None),
            }
            try:
                created = self.client.create(LEASES, body)
            except ApiError as cexc:
                log.debug("creating lease failed", error=str(cexc))
                return False
            self._observe(created)
            return True
        except Exception as exc:  # connection trouble: not leading this round
            log.warning("reading lease failed", error=str(exc))
            return False
        spec = lease.get("spec") or {}
        self._observe(lease)
        holder = spec.get("holderIdentity") or ""
        me = cfg.identity
        if holder and holder != me and time.monotonic() < self._observed_time + cfg.lease_duration:
            return False  # someone else holds an unexpired lease
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != me:
            transitions += 1
        acquire = spec.get("acquireTime") if holder == me else None
        lease["spec"] = self._record(now, transitions, acquire)
        try:
            updated = self.client.update(LEASES, lease)
        except Exception as exc:
            log.debug("updating lease failed", error=str(exc))
            return False
        self._observe(updated)
        return True

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = lease.get("spec") or {}
        rv = (lease.get("metadata") or {}).get("resourceVersion", "")
        if spec != self._observed_record:
            self._observed_record = spec
            self._observed_time = time.monotonic()
        self._observed_rv = rv
        holder = spec.get("holderIdentity") or ""
        if holder != self._leader:
            self._leader = holder
            if holder:
                self.config.on_new_leader(holder)

    def release(self) -> None:
        """Give the lease up (holder emptied) so a successor need not wait it out."""
        cfg = self.config
        try:
            lease = self.client.get(LEASES, cfg.lease_name, cfg.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") != cfg.identity:
                return
            now = time.time()
            lease["spec"].update(
                {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": _micro_time(now)}
            )
            self.client.update(LEASES, lease)
        except Exception as exc:
            log.warning("releasing lease failed", error=str(exc))
