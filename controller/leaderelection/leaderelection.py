"""LeaderElector: at most one holder of a Lease at a time, with client-go's timing rules.

- A candidate tries every `retry_period` (jittered ×1.2) to acquire the Lease, and once more
  just after the holder's lease would run out if that comes first. It may take it when the
  Lease does not exist, is held by nobody, or its record has not changed for the holder's
  `leaseDurationSeconds` as observed on *our* clock (never the holder's timestamps, so clock
  skew between machines does not matter).
- Writes carry the Lease's resourceVersion, so two candidates racing for it cannot both win.
- The leader renews every `retry_period`. Leadership is valid until `renew_deadline` after the
  moment the last successful acquire/renew *started* (`may_write`, the write fence): another
  candidate observes that renewal only after it started and then waits `lease_duration` >
  `renew_deadline`, so no one else can lead while the fence is open — even if this process was
  frozen for a while (the fence reads the monotonic clock, which keeps running). The margin is
  `lease_duration - renew_deadline`, for the two machines' clock rates to differ by. Each Lease
  call is a single try bounded by the time left, so a slow API server cannot stretch a renewal
  past the deadline; past it, the leader stops leading (`on_stopped_leading`) without sending
  anything more.
- When `stop` is set, the fence closes first and then the Lease is released (holder emptied) so a
  successor does not wait it out.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import structlog

from controller.clock import REAL_CLOCK, Clock
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import LEASES

log = structlog.get_logger("leaderelection")
EXPIRY_MARGIN = 0.05  # seconds after an observed lease runs out that a candidate looks again


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

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period * 1.2:
            raise ValueError("need lease_duration > renew_deadline > 1.2 × retry_period")


class LeaderElector:
    def __init__(
        self,
        client: RESTClient,
        config: LeaderElectionConfig,
        metrics: ControllerMetrics | None = None,
        *,
        clock: Clock = REAL_CLOCK,
    ):
        self.client = client
        self.config = config
        self.metrics = metrics or client.metrics
        self.clock = clock
        self._lease: dict[str, Any] | None = None  # as last read or written
        self._observed_record: dict[str, Any] | None = None
        self._observed_time = 0.0
        self._leading = threading.Event()
        # monotonic time at which the last successful acquire/renew request started
        self._renewed_at = -math.inf
        self._leader = ""

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    @property
    def leader(self) -> str:
        return self._leader

    def may_write(self) -> bool:
        """The write fence: True only while this replica provably holds the Lease."""
        return self._leading.is_set() and self.clock.now() < self._valid_until()

    def _valid_until(self) -> float:
        return self._renewed_at + self.config.renew_deadline

    def run(self, stop: threading.Event) -> None:
        """Acquire, lead until the lease is lost or `stop` is set (then release it), and return."""
        if not self._acquire(stop):
            return
        self._leading.set()
        self.metrics.leader.labels(self.config.lease_name).set(1)
        log.info("became leader", lease=self.config.lease_name, identity=self.config.identity)
        threading.Thread(target=self.config.on_started_leading, name="leading", daemon=True).start()
        try:
            self._renew(stop)
        finally:
            self._leading.clear()  # the fence closes before anything else happens
            self.metrics.leader.labels(self.config.lease_name).set(0)
            if stop.is_set():
                self.release()
            log.info("stopped leading", lease=self.config.lease_name, identity=self.config.identity)
            self.config.on_stopped_leading()

    def _acquire(self, stop: threading.Event) -> bool:
        while not stop.is_set():
            if self._try_acquire_or_renew():
                return True
            stop.wait(self._next_look())
        return False

    def _next_look(self) -> float:
        """Seconds until a candidate reads the Lease again: client-go's retry period, jittered up
        to 1.2×, brought forward to EXPIRY_MARGIN after the observed holder's lease runs out when
        that comes sooner. A dead leader's successor so takes over at the expiry, not up to a
        retry period after it; only when a read happens changes, never who may take the Lease."""
        wait = self.config.retry_period * (1 + 0.2 * random.random())
        if (self._observed_record or {}).get("holderIdentity"):
            left = self._observed_expiry() - self.clock.now()
            if 0 <= left < wait:
                return left + EXPIRY_MARGIN
        return wait

    def _observed_expiry(self) -> float:
        """When the observed holder's lease runs out on our clock: the moment we saw its record
        change plus the holder's own `leaseDurationSeconds` (client-go's `isLeaseValid`; our
        `lease_duration` if the record has none). The holder's, not ours: a candidate with a
        shorter lease must not take over while a holder with a longer renew deadline still writes."""
        duration = (self._observed_record or {}).get("leaseDurationSeconds") or self.config.lease_duration
        return self._observed_time + float(duration)

    def _renew(self, stop: threading.Event) -> None:
        """Renew every `retry_period` until `stop`; return when leadership has run out."""
        while not stop.wait(self.config.retry_period):
            while not self._try_acquire_or_renew():
                left = self._valid_until() - self.clock.now()
                if left <= 0:
                    log.warning("failed to renew lease within the deadline", lease=self.config.lease_name)
                    return
                if stop.wait(min(self.config.retry_period, left)):
                    return

    def _record(self, now: float, transitions: int, acquire_time: str | None) -> dict[str, Any]:
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": math.ceil(self.config.lease_duration),
            "acquireTime": acquire_time or _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }

    def _budget(self, renewing: bool) -> float:
        """How long the next Lease call may take: a leader's must end while it still leads."""
        if renewing:
            return self._valid_until() - self.clock.now()
        return self.config.renew_deadline

    def _try_acquire_or_renew(self) -> bool:
        cfg = self.config
        started = self.clock.now()
        now = self.clock.wall()
        renewing = self._leading.is_set()
        if self._budget(renewing) <= 0:
            return False
        try:
            lease = self.client.get(
                LEASES, cfg.lease_name, cfg.namespace, attempts=1, timeout=self._budget(renewing)
            )
        except ApiError as exc:
            if not exc.not_found:
                log.warning("reading lease failed", error=str(exc))
                return False
            return self._create(started, now)
        except Exception as exc:  # connection trouble or a timeout: not leading this round
            log.warning("reading lease failed", error=str(exc))
            return False
        spec = lease.get("spec") or {}
        self._observe(lease)
        holder = spec.get("holderIdentity") or ""
        me = cfg.identity
        if holder and holder != me:
            if renewing:
                self._renewed_at = -math.inf  # someone else holds it: stop writing at once
                return False
            if self.clock.now() < self._observed_expiry():
                return False  # someone else holds an unexpired lease
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != me:
            transitions += 1
        acquire = spec.get("acquireTime") if holder == me else None
        lease["spec"] = self._record(now, transitions, acquire)
        budget = self._budget(renewing)
        if budget <= 0:
            return False  # leadership ran out while reading: a late renewal must not be sent
        try:
            updated = self.client.update(LEASES, lease, attempts=1, timeout=budget, fenced=False)
        except Exception as exc:
            log.debug("updating lease failed", error=str(exc))
            return False
        self._observe(updated)
        self._renewed_at = started
        return True

    def _create(self, started: float, now: float) -> bool:
        cfg = self.config
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": cfg.lease_name, "namespace": cfg.namespace},
            "spec": self._record(now, 0, None),
        }
        try:
            created = self.client.create(
                LEASES, body, attempts=1, timeout=self._budget(self._leading.is_set()), fenced=False
            )
        except Exception as exc:
            log.debug("creating lease failed", error=str(exc))
            return False
        self._observe(created)
        self._renewed_at = started
        return True

    def _observe(self, lease: dict[str, Any]) -> None:
        self._lease = lease
        spec = lease.get("spec") or {}
        if spec != self._observed_record:
            self._observed_record = spec
            self._observed_time = self.clock.now()
        self._leader = spec.get("holderIdentity") or ""

    def release(self) -> None:
        """Give the lease up (holder emptied) so a successor need not wait it out.

        The fence closes first: nothing this process sends afterwards is a write. The update
        carries the resourceVersion we last saw, so it cannot undo a successor's takeover.
        """
        self._leading.clear()
        lease = self._lease
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.config.identity:
            return
        released = {**lease, "spec": {**lease["spec"]}}
        released["spec"].update(
            {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": _micro_time(self.clock.wall())}
        )
        try:
            self._observe(
                self.client.update(
                    LEASES, released, attempts=1, timeout=self.config.renew_deadline, fenced=False
                )
            )
        except Exception as exc:
            log.warning("releasing lease failed", error=str(exc))
