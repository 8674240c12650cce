"""The objects a TorchrunJob owns (Service, worker Job, claims, PodGroup): make them exist, never
touch others'.

What `Children` guarantees — the one create-or-adopt path of the job controller:
- `ensure(resource, job, desired)` is a step (`steps.py`): `Proceed(obj)` with the object of
  that name controlled by this job (from the cache, or created), or a `wait` with
  `Admitted=False NameConflict` naming the object when the name is taken by an object it does not
  control (no controller owner reference with the job's UID). A foreign object is never adopted,
  patched or deleted. A create answered with AlreadyExists (the cache is behind, or a create we
  sent before) is resolved with one GET: ours → use it; someone else's → the conflict; gone
  again → a plain retry with backoff. `ours` widens "controlled by this job" where an object
  without an owner is the job's to use (a persisted checkpoints claim: `is_reattachable`).
- `delete(resource, job)` deletes the object only when this job controls it, with a UID
  precondition, so a same-named object created meanwhile is never hit.
- Writes use field manager `torchrun-controller` (the REST client's default); each create and
  delete is logged with the job's `key` and the object's resource and name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from controller.api import JOB_KIND, JobConditionType, TorchrunJob
from controller.api.reasons import Reason
from controller.cache import Lister
from controller.meta import Obj, Resource, controller_of, is_controlled_by
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.torchrunjob.steps import Decision, Observed, Proceed, Step, wait

log = structlog.get_logger("torchrunjob")
Ours = Callable[[Obj], bool]


@dataclass(frozen=True)
class NameConflict:
    """An object the job needs to create exists under the same name and is not the job's."""

    kind: str
    namespace: str
    name: str
    earlier_job: bool  # controlled by an earlier TorchrunJob of the same name (being removed)

    @property
    def message(self) -> str:
        what = f"{self.kind} {self.namespace}/{self.name}"
        if self.earlier_job:
            return (
                f"{what} still belongs to an earlier TorchrunJob of this name and is being removed; "
                "the job starts when it is gone"
            )
        return (
            f"{what} already exists and is not controlled by this TorchrunJob (no controller "
            "ownerReference with its UID); the controller never adopts or changes it: delete or "
            "rename it, or submit the job under another name. The job starts by itself once the name "
            "is free"
        )


def name_conflict(resource: Resource, obj: Obj) -> NameConflict:
    """The conflict of an object named like one of the job's that the job does not control."""
    meta = obj["metadata"]
    ref = controller_of(obj)
    return NameConflict(
        resource.kind,
        meta.get("namespace", ""),
        meta["name"],
        ref is not None and ref.get("kind") == JOB_KIND,
    )


def conflict_wait(conflict: NameConflict) -> Decision:
    """`Admitted=False NameConflict` naming the object, retried with backoff: the name being
    freed by someone else is announced by no event of ours."""
    return wait(
        Observed(JobConditionType.ADMITTED, False, Reason.NAME_CONFLICT, conflict.message), retry=True
    )


class Children:
    def __init__(self, client: RESTClient, listers: Mapping[Resource, Lister]) -> None:
        self.client = client
        self.listers = listers

    def get(self, resource: Resource, job: TorchrunJob, name: str | None = None) -> Obj | None:
        """The cached object of that name (default: the job's name), whoever owns it."""
        return self.listers[resource].get(name or job.name, job.namespace)

    def ensure(
        self, resource: Resource, job: TorchrunJob, desired: dict[str, Any], *, ours: Ours | None = None
    ) -> Step[Obj]:
        return self.ensure_built(resource, job, desired["metadata"]["name"], lambda: desired, ours=ours)

    def ensure_built(
        self,
        resource: Resource,
        job: TorchrunJob,
        name: str,
        build: Callable[[], dict[str, Any]],
        *,
        ours: Ours | None = None,
    ) -> Step[Obj]:
        """`ensure` of the object `build()` returns, named `name`: `build` is called only when the
        object must be created (a pass that finds it cached builds nothing). `ours`: whether an
        existing object is the job's (default: the job controls it)."""
        mine = ours or (lambda obj: is_controlled_by(obj, job.metadata.uid))
        cached = self.get(resource, job, name)
        if cached is not None:
            if mine(cached):
                return Proceed(cached)
            return conflict_wait(name_conflict(resource, cached))
        try:
            created: Obj = self.client.create(resource, build())
            log.info("created", key=job.key, resource=resource.key, name=name)
            return Proceed(created)
        except ApiError as exc:
            if not exc.already_exists:
                raise
        return self._resolve_existing(resource, job, name, mine)

    def _resolve_existing(self, resource: Resource, job: TorchrunJob, name: str, mine: Ours) -> Step[Obj]:
        """After AlreadyExists: one GET tells ours (cache behind) from someone else's."""
        try:
            live = self.client.get(resource, name, job.namespace)
        except ApiError as exc:
            if exc.not_found:  # deleted between our create and this read: try again later
                return wait(retry=True)
            raise
        if mine(live):
            return Proceed(live)
        return conflict_wait(name_conflict(resource, live))

    def delete(self, resource: Resource, job: TorchrunJob, name: str | None = None) -> None:
        existing = self.get(resource, job, name)
        if (
            existing is None
            or existing["metadata"].get("deletionTimestamp")
            or not is_controlled_by(existing, job.metadata.uid)
        ):
            return
        name = existing["metadata"]["name"]
        try:
            self.client.delete(
                resource,
                name,
                job.namespace,
                propagation_policy="Background",
                uid=existing["metadata"].get("uid"),
            )
            log.info("deleted", key=job.key, resource=resource.key, name=name)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise
