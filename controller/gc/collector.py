"""GarbageCollector: every `interval` seconds, delete what our jobs provably left behind.

What it deletes, and the proof it demands first (SPEC §7, §11 — a label is never proof):
- **Orphans**: Jobs, pods, Services and PVCs whose controller owner reference names a TorchrunJob
  (directly, or through a batch Job that a TorchrunJob controls) whose UID no longer exists. The
  cache says who might be an orphan; a GET confirms it before anything is deleted (absent, or
  present under a new UID: re-created with the same name), so a job that is not in our cache yet
  is never harmed. Every DELETE carries a UID precondition.
- **Stuck pods** of ours: deletion overdue by `stuck_after` seconds, no finalizers holding them,
  and a node that is gone, NotReady for `node_lost_after` seconds, or tainted out-of-service —
  force-deleted (grace period 0). A pod on a healthy node is left to its kubelet.
Never deleted: objects with no controller owner reference (whatever their labels), persisted
checkpoints (`torchrun.ai/persist=true`), objects another controller owns. Pods whose worker Job
is already gone stay provable while this process remembers that Job was ours; after a restart
they are left to Kubernetes' own pod garbage collector.
Reads come from the informer caches (nodes by GET, only for overdue pods); each object deleted is
counted once in `torchrun_gc_deletions_total{resource}`.

No object can stop or steer a pass (any user may create one with our label and any owner
reference): an owner reference naming what no TorchrunJob can be called (not a DNS subdomain) is
logged and passed over without a request, and every request path is escaped (`meta.api_path`);
an error on one object is logged, counted in `torchrun_gc_errors_total{resource}`, and the pass
goes on to the next. Only losing the lease ends a pass early: no write could be sent.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping

import structlog

from controller.api import PERSIST_LABEL, parse_time
from controller.api.core import DNS_SUBDOMAIN_PATTERN, MAX_NAME_LENGTH
from controller.api.resources import BATCH_JOB_KIND, owning_job
from controller.cache import Lister
from controller.clock import Clock, RealClock
from controller.meta import Obj, Owner, Resource, controller_of
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError, LeadershipLostError
from controller.rest.resources import JOBS, NODES, PODS

log = structlog.get_logger("gc")

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


def _parse_time(value: str) -> float:
    return parse_time(value).timestamp()


class GarbageCollector:
    def __init__(
        self,
        client: RESTClient,
        job_lister: Lister,
        job_resource: Resource,
        owned: Mapping[Resource, Lister],
        *,
        interval: float = 60.0,
        stuck_after: float = 60.0,
        node_lost_after: float = 60.0,
        metrics: ControllerMetrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.clock = clock or RealClock()
        self.job_lister = job_lister
        self.job_resource = job_resource
        self.owned = owned
        self.interval = interval
        self.stuck_after = stuck_after
        self.node_lost_after = node_lost_after
        self.metrics = metrics or client.metrics
        # batch Job UID → the TorchrunJob that controlled it, remembered past the Job's deletion
        self._worker_jobs: dict[str, Owner] = {}
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._loop, args=(stop,), name="gc", daemon=True)
        self._thread.start()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            try:
                self.collect()
            except Exception:
                log.exception("garbage collection pass failed")

    def collect(self, now: float | None = None) -> int:
        """One pass; returns how many objects were deleted (each one counted once)."""
        now = self.clock.wall() if now is None else now
        self._remember_worker_jobs()
        gone: dict[Owner, bool] = {}
        nodes: dict[str, str | None] = {}
        deleted = 0
        for resource, lister in self.owned.items():
            for obj in lister.list():
                deleted += self._collect_one(resource, obj, now, gone, nodes)
        return deleted

    def _collect_one(
        self, resource: Resource, obj: Obj, now: float, gone: dict[Owner, bool], nodes: dict[str, str | None]
    ) -> int:
        """1 when `obj` was deleted, else 0. Its error is its own: logged, counted in
        `torchrun_gc_errors_total{resource}`, and 0 returned — except a lost lease, raised."""
        try:
            return int(self._settle(resource, obj, now, gone, nodes))
        except LeadershipLostError:
            raise
        except Exception:
            self.metrics.gc_errors.labels(resource.plural).inc()
            log.exception("garbage collection of one object failed", resource=resource.key, key=_key(obj))
            return 0

    def _settle(
        self, resource: Resource, obj: Obj, now: float, gone: dict[Owner, bool], nodes: dict[str, str | None]
    ) -> bool:
        """Delete `obj` if it is provably an orphan, or our pod stuck terminating on a lost node."""
        owner = self.owner_of(obj)
        if owner is None or _persisted(obj):
            return False
        if not is_dns_subdomain(owner.name):
            log.warning(
                "owner reference names no possible TorchrunJob: passed over",
                resource=resource.key,
                key=_key(obj),
                owner=owner.name[:300],
            )
            return False
        if not obj["metadata"].get("deletionTimestamp"):
            return self._owner_gone(owner, gone) and self._delete(resource, obj, "orphan")
        if resource != PODS:
            return False
        why = self._stuck_why(obj, now, nodes)
        return bool(why) and self._delete(resource, obj, f"stuck terminating: {why}", grace=0)

    # -- proof of ownership ----------------------------------------------------------------------

    def owner_of(self, obj: Obj) -> Owner | None:
        """The TorchrunJob that controls `obj`, directly or through its worker Job (from the cache,
        or remembered from when it was there); else None."""
        owner = owning_job(obj, self._worker_job)
        if owner is not None:
            return owner
        ref = controller_of(obj)
        return self._worker_jobs.get(ref["uid"]) if BATCH_JOB_KIND.named_by(ref) and ref else None

    def _worker_job(self, namespace: str, name: str) -> Obj | None:
        worker = self.owned.get(JOBS)
        return worker.get(name, namespace) if worker is not None else None

    def _remember_worker_jobs(self) -> None:
        lister = self.owned.get(JOBS)
        if lister is None:
            return
        seen: dict[str, Owner] = {}
        for job in lister.list():
            owner = owning_job(job, _no_worker_job)
            if owner is not None:
                seen[job["metadata"]["uid"]] = owner
        # keep what we learned about Jobs already deleted while pods of theirs are still cached
        pod_lister = self.owned.get(PODS)
        live_refs = {
            ref["uid"] for ref in (controller_of(p) for p in (pod_lister.list() if pod_lister else ())) if ref
        }
        kept = {uid: o for uid, o in self._worker_jobs.items() if uid in live_refs}
        self._worker_jobs = {**kept, **seen}

    def _owner_gone(self, owner: Owner, memo: dict[Owner, bool]) -> bool:
        """True when no TorchrunJob with the owner's UID exists (confirmed by a GET)."""
        if owner in memo:
            return memo[owner]
        cached = self.job_lister.get(owner.name, owner.namespace)
        if cached is not None and cached["metadata"].get("uid") == owner.uid:
            memo[owner] = False
            return False
        try:
            live = self.client.get(self.job_resource, owner.name, owner.namespace)
            memo[owner] = live["metadata"].get("uid") != owner.uid
        except ApiError as exc:
            if not exc.not_found:
                raise
            memo[owner] = True
        return memo[owner]

    # -- stuck pods --------------------------------------------------------------------------------

    def _stuck_why(self, pod: Obj, now: float, nodes: dict[str, str | None]) -> str | None:
        meta = pod["metadata"]
        if meta.get("finalizers"):
            return None  # whoever holds it must let go first; forcing would not remove it
        if now <= _parse_time(meta["deletionTimestamp"]) + self.stuck_after:
            return None
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return None
        if node not in nodes:
            nodes[node] = self._node_lost(node, now)
        return nodes[node]

    def _node_lost(self, name: str, now: float) -> str | None:
        try:
            node: Obj | None = self.client.get(NODES, name)
        except ApiError as exc:
            if not exc.not_found:
                raise
            node = None
        return node_lost(name, node, now, self.node_lost_after)

    # -- the one write ------------------------------------------------------------------------------

    def _delete(self, resource: Resource, obj: Obj, why: str, grace: int | None = None) -> bool:
        meta = obj["metadata"]
        try:
            self.client.delete(
                resource, meta["name"], meta.get("namespace"), grace_period_seconds=grace, uid=meta.get("uid")
            )
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return False
            raise
        self.metrics.gc_deletions.labels(resource.plural).inc()
        log.info("garbage collected", resource=resource.key, key=_key(obj), why=why)
        return True


def node_lost(name: str, node: Obj | None, now: float, grace: float) -> str | None:
    """Why a node can no longer finish its pods' deletion — gone, tainted out-of-service, or
    NotReady for more than `grace` seconds — or None while it still can."""
    if node is None:
        return f"node {name} is gone"
    spec, status = node.get("spec") or {}, node.get("status") or {}
    if any(t.get("key") == OUT_OF_SERVICE_TAINT for t in spec.get("taints") or ()):
        return f"node {name} is tainted {OUT_OF_SERVICE_TAINT}"
    for cond in status.get("conditions") or ():
        if cond.get("type") != "Ready" or cond.get("status") == "True":
            continue
        since = cond.get("lastTransitionTime")
        if since and now > _parse_time(since) + grace:
            return f"node {name} is NotReady since {since}"
    return None


_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)


def is_dns_subdomain(name: str) -> bool:
    """True when `name` is an RFC 1123 DNS subdomain of at most 253 characters: the rule every
    TorchrunJob's and Job's name meets, so an owner reference naming anything else names nothing."""
    return len(name) <= MAX_NAME_LENGTH and _DNS_SUBDOMAIN.fullmatch(name) is not None


def _key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace')}/{meta['name']}"


def _persisted(obj: Obj) -> bool:
    return ((obj["metadata"].get("labels") or {}).get(PERSIST_LABEL)) == "true"


def _no_worker_job(_namespace: str, _name: str) -> Obj | None:
    return None  # a worker Job is controlled by its TorchrunJob directly
