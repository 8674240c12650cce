"""WorkspaceClaims: a job's PVCs exist, and how long the workspace claim has waited to bind.

What `ensure` guarantees, through `Children` (a same-named claim the job may not use is never
adopted, changed or deleted — it is a `NameConflict`):
- `<job>-workspace` exists for every workspace source but `none`; `<job>-checkpoints` when the
  queue enables checkpoints. A persisted checkpoints claim left by an earlier job of the same
  name (`is_reattachable`) is mounted again, untouched;
- the answer is a step (`steps.py`): `Proceed(claim)` with the workspace claim as the cache had
  it before this pass (None: not cached yet, or no workspace) — the sync pod waits for it
  (`generations.py`) — or the conflict's `wait`.
`binding` says what an unbound workspace claim waits for: `Syncing` with a timer until the bind
deadline (`claim_bind_timeout`), then `ClaimNotBound` quoting the claim's last Events. `clean`
(autoclean of a finished job) deletes the workspace claim; checkpoints stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from controller.api import JobTopology, TorchrunJob, TorchrunQueue, parse_time
from controller.api.reasons import Reason
from controller.meta import Obj
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import EVENTS, PVCS
from controller.torchrunjob.children import Children
from controller.torchrunjob.manifests.storage import (
    build_checkpoints_pvc,
    build_workspace_pvc,
    has_workspace,
    is_reattachable,
    workspace_claim_name,
)
from controller.torchrunjob.steps import Proceed, Step


@dataclass(frozen=True)
class Binding:
    """Why the workspace claim holds the sync back: the WorkspaceReady reason and message, and the
    seconds until the bind deadline (None: past it)."""

    reason: str
    message: str
    timer: float | None = None


class WorkspaceClaims:
    def __init__(self, client: RESTClient, children: Children, bind_timeout: float) -> None:
        self.client = client
        self.children = children
        self.bind_timeout = bind_timeout

    def ensure(self, job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology) -> Step[Obj | None]:
        cached = self.children.get(PVCS, job, workspace_claim_name(job.name))
        if has_workspace(job):
            got = self.children.ensure(PVCS, job, build_workspace_pvc(job, queue, topo))
            if not isinstance(got, Proceed):
                return got
        checkpoints = queue.spec.storage.checkpoints
        if checkpoints.enabled:
            ours = (lambda pvc: is_reattachable(pvc, job)) if checkpoints.persist else None
            got = self.children.ensure(PVCS, job, build_checkpoints_pvc(job, queue, topo), ours=ours)
            if not isinstance(got, Proceed):
                return got
        return Proceed(cached)

    def binding(self, job: TorchrunJob, now: datetime) -> Binding | None:
        """What the workspace claim waits for (None: it is bound, or not cached)."""
        claim_name = workspace_claim_name(job.name)
        claim = self.children.get(PVCS, job, claim_name)
        if claim is None or (claim.get("status") or {}).get("phase") == "Bound":
            return None
        created = parse_time(claim["metadata"]["creationTimestamp"])
        left = self.bind_timeout - (now - created).total_seconds()
        if left > 0:
            return Binding(Reason.SYNCING, f"waiting for PVC {claim_name} to bind", timer=left)
        events = self._events(job, claim_name)
        klass = claim["spec"].get("storageClassName") or "<cluster default>"
        message = (
            f"PVC {claim_name} is not bound after {self.bind_timeout:g}s (storage class {klass}): {events}"
        )
        return Binding(Reason.CLAIM_NOT_BOUND, message)

    def _events(self, job: TorchrunJob, claim_name: str) -> str:
        selector = f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={claim_name}"
        try:
            items = self.client.list(EVENTS, job.namespace, field_selector=selector).get("items") or []
        except ApiError as exc:
            return f"(its events could not be read: {exc.reason})"
        items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        quoted = [f"{e.get('reason')}: {e.get('message')}" for e in items[-3:]]
        return "; ".join(quoted) if quoted else "no events (is there a provisioner for this storage class?)"

    def clean(self, job: TorchrunJob) -> None:
        """Autoclean of a finished job: the workspace claim goes (checkpoints stay)."""
        self.children.delete(PVCS, job, workspace_claim_name(job.name))
