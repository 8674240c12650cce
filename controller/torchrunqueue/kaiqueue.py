"""The KAI-Scheduler Queue of a TorchrunQueue (`scheduling.run.ai/v2`, cluster-scoped; SPEC §5).

`build_kai_queue` is pure: a TorchrunQueue in, the KAI Queue it implies out. It is named
`kaiQueue` (the TorchrunQueue's name when absent), its `spec.parentQueue` is `parentKaiQueue`,
and `spec.resources.{gpu,cpu,memory}` come from `quota` in KAI's units — GPUs in fractions, CPU
in millicores, memory in megabytes (10^6 bytes) — always written in full: a resource the quota
leaves out, or a limit it leaves out, is written as KAI's unlimited (-1); a missing quota as 0;
`overQuotaWeight` as given (1 by default). It carries an owner reference to the TorchrunQueue,
so deleting the TorchrunQueue deletes it, and label `torchrun.ai/queue` to find it again.

`KaiQueues` does the I/O: creates the Queue or patches only the fields above when they drift
(an admin's other fields, such as `priority`, are left as they are); never touches a Queue of
that name it does not own (reported, and used as it is); deletes the Queues it owns under any
other name (after `kaiQueue` is renamed, or the scheduler changed away from KAI).
It reads KAI Queues (ours, the admins' and parents alike) from one unselected, cluster-wide
informer, an `OptionalInformers` cache started once discovery shows `scheduling.run.ai/v2`;
only writes go to the API. A create answered AlreadyExists (the cache has not seen the Queue
yet) is a rate-limited retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import structlog

from controller.api import QUEUE_KIND, QUEUE_LABEL, Quantity, QueueQuota, ResourceQuota, TorchrunQueue
from controller.api.reasons import QueueReason
from controller.api.resources import controller_reference
from controller.cache import Lister, OptionalInformers
from controller.errors import TransientError
from controller.meta import Resource, is_controlled_by
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError

log = structlog.get_logger("kaiqueue")

KAI_QUEUES = Resource("scheduling.run.ai", "v2", "queues", "Queue", namespaced=False)
KAI_PODGROUPS_VERSION = "scheduling.run.ai/v2alpha2"
UNLIMITED = -1

# KAI's unit of each resource, as a multiple of the Kubernetes quantity's unit
_UNITS: dict[str, Fraction] = {"gpu": Fraction(1), "cpu": Fraction(1000), "memory": Fraction(1, 10**6)}

Number = int | float


def kai_number(resource: str, quantity: Quantity) -> Number:
    """A Kubernetes quantity in KAI's unit for `resource` (whole numbers stay integers)."""
    amount = quantity.amount * _UNITS[resource]
    return amount.numerator if amount.denominator == 1 else float(amount)


def kai_resource(resource: str, quota: ResourceQuota | None) -> dict[str, Number]:
    given = quota or ResourceQuota()
    return {
        "quota": kai_number(resource, given.quota) if given.quota is not None else 0,
        "limit": kai_number(resource, given.limit) if given.limit is not None else UNLIMITED,
        "overQuotaWeight": given.over_quota_weight,
    }


def kai_resources(quota: QueueQuota | None) -> dict[str, dict[str, Number]]:
    q = quota or QueueQuota()
    return {
        "gpu": kai_resource("gpu", q.gpu),
        "cpu": kai_resource("cpu", q.cpu),
        "memory": kai_resource("memory", q.memory),
    }


def owner_reference(queue: TorchrunQueue) -> dict[str, Any]:
    return controller_reference(QUEUE_KIND, queue.name, queue.metadata.uid)


def build_kai_queue(queue: TorchrunQueue) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": kai_resources(queue.spec.quota)}
    if queue.spec.parent_kai_queue:
        spec["parentQueue"] = queue.spec.parent_kai_queue
    return {
        "apiVersion": KAI_QUEUES.api_version,
        "kind": KAI_QUEUES.kind,
        "metadata": {
            "name": queue.kai_queue_name,
            "labels": {QUEUE_LABEL: queue.name},
            "ownerReferences": [owner_reference(queue)],
        },
        "spec": spec,
    }


def kai_queue_patch(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that brings the fields we own back to `desired` ({} when in sync)."""
    have = existing.get("spec") or {}
    want = desired["spec"]
    spec: dict[str, Any] = {}
    if have.get("parentQueue") != want.get("parentQueue"):
        spec["parentQueue"] = want.get("parentQueue")  # None removes it
    have_res = have.get("resources") or {}
    resources = {
        name: fields
        for name, fields in want["resources"].items()
        if any((have_res.get(name) or {}).get(k) != v for k, v in fields.items())
    }
    if resources:
        spec["resources"] = resources
    patch: dict[str, Any] = {"spec": spec} if spec else {}
    labels = existing["metadata"].get("labels") or {}
    if labels.get(QUEUE_LABEL) != desired["metadata"]["labels"][QUEUE_LABEL]:
        patch["metadata"] = {"labels": desired["metadata"]["labels"]}
    return patch


@dataclass(frozen=True)
class ConditionState:
    """What a condition of the TorchrunQueue says (`Ready`, `KaiQueueReady`)."""

    ready: bool
    reason: QueueReason
    message: str


class KaiQueues:
    """Keeps a TorchrunQueue's KAI Queue in sync (see the module docstring)."""

    def __init__(self, client: RESTClient, informers: OptionalInformers) -> None:
        self.client = client
        self.informers = informers

    def _cache(self) -> Lister | None:
        return self.informers.lister(KAI_QUEUES)

    def get(self, name: str) -> Mapping[str, Any] | None:
        """The KAI Queue of that name, from the cache (None too when KAI is not installed)."""
        cache = self._cache()
        return cache.get(name) if cache is not None else None

    def sync(self, queue: TorchrunQueue) -> ConditionState:
        desired = build_kai_queue(queue)
        name = queue.kai_queue_name
        existing = self.get(name)
        if existing is None:
            return self._create(desired)
        if not is_controlled_by(existing, queue.metadata.uid):
            return ConditionState(
                True,
                QueueReason.KAI_QUEUE_NOT_MANAGED,
                f"KAI Queue {name} exists and is not managed by this TorchrunQueue: jobs use it as it is "
                "(parentKaiQueue and quota are not applied to it)",
            )
        patch = kai_queue_patch(existing, desired)
        if patch:
            try:
                self.client.patch(KAI_QUEUES, name, patch)
            except ApiError as exc:
                if exc.invalid:
                    return ConditionState(False, QueueReason.KAI_QUEUE_REJECTED, f"KAI Queue {name}: {exc}")
                raise
            log.info("kai queue updated", queue=queue.name, kai_queue=name, patch=patch)
        return ConditionState(True, QueueReason.KAI_QUEUE_SYNCED, _describe(desired))

    def _create(self, desired: dict[str, Any]) -> ConditionState:
        name = desired["metadata"]["name"]
        try:
            self.client.create(KAI_QUEUES, desired)
        except ApiError as exc:
            if exc.invalid:
                return ConditionState(False, QueueReason.KAI_QUEUE_REJECTED, f"KAI Queue {name}: {exc}")
            if exc.already_exists:
                raise TransientError(f"KAI Queue {name} exists but is not in the cache yet") from exc
            raise
        log.info("kai queue created", kai_queue=name, spec=desired["spec"])
        return ConditionState(True, QueueReason.KAI_QUEUE_SYNCED, _describe(desired))

    def prune(self, queue: TorchrunQueue, keep: str | None) -> None:
        """Delete the KAI Queues this TorchrunQueue owns, except `keep`."""
        cache = self._cache()
        if cache is None:
            return
        for item in cache.list(selector={QUEUE_LABEL: queue.name}):
            meta = item["metadata"]
            if meta["name"] == keep or not is_controlled_by(item, queue.metadata.uid):
                continue
            try:
                self.client.delete(KAI_QUEUES, meta["name"], uid=meta.get("uid"))
                log.info("kai queue deleted", queue=queue.name, kai_queue=meta["name"])
            except ApiError as exc:
                if not (exc.not_found or exc.conflict):
                    raise


def _describe(desired: Mapping[str, Any]) -> str:
    spec = desired["spec"]
    gpu = spec["resources"]["gpu"]
    parent = spec.get("parentQueue")
    where = f" under {parent}" if parent else ""
    limit = "unlimited" if gpu["limit"] == UNLIMITED else gpu["limit"]
    return f"KAI Queue {desired['metadata']['name']}{where}: GPU quota {gpu['quota']}, limit {limit}"
