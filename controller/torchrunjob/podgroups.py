"""A job's gang: the PodGroup its scheduler reads, and Kueue's admission switch (SPEC §5).

What `PodGroups.ensure(job, queue, topo)` guarantees, called before the worker Job is made:

- kai-scheduler, coscheduling, volcano: one PodGroup `<job>` in the job's namespace, of the
  scheduler's own kind (`scheduling.run.ai/v2alpha2`, `scheduling.x-k8s.io/v1alpha1`,
  `scheduling.volcano.sh/v1beta1`), owned by the TorchrunJob (it goes when the job goes),
  labelled `torchrun-job-name`/`torchrun.ai/role: worker`, with `minMember` = the nodes the job
  needs to start (`elastic.minNodes` for elastic jobs) and, where the kind has them, the queue
  and the priority class of the pods. It exists before any pod does, so no pod is ever scheduled
  outside its gang. Only the fields written here are patched when they drift; the schedulers'
  status and their own fields are never touched. The pods join it through the label or
  annotation of `scheduling.py`.
- A PodGroup of the same name owned by an earlier TorchrunJob of the same name is waited out
  (the garbage collector is removing it): a rate-limited retry, and its delete event brings the
  job back at once. One created by someone else is left alone and used.
- A PodGroup kind the cluster does not serve is a `TransientError` (retried in 30 s), never a
  crash: the queue controller turns the same fact into `Ready=False`, which then holds the job
  back with a `QueueNotReady` condition.

Reads come from caches, never from the API on a pass (SPEC §7): PodGroups from an informer per
kind narrowed by the `torchrun-job-name` label, Kueue Workloads (Kueue's, unlabelled by us) from
an unselected informer in the watched namespace — both `OptionalInformers`, started only once
discovery shows the kind is served (the CRDs may come after the controller). A PodGroup missing
from the cache is created; if the API answers AlreadyExists (the cache lags our own create, or
the PodGroup is someone else's and lacks our label) it is read once, fresh, and handled as above.
PodGroup events enqueue the job that controls them (`wiring.py`), so drift and the earlier job's
PodGroup going away are noticed without polling.

Kueue and suspend. Kueue admits a Job by unsuspending it and, while its Workload stays admitted,
unsuspends it again whenever it finds it suspended; so setting `Job.spec.suspend` alone would
fight Kueue over the field. Kueue's own switch for "stop and do not readmit" is the Workload's
`spec.active`. So the controller writes `Job.spec.suspend` only towards true (the worker Job is
created suspended and a user's suspend sets it; `creates_suspended` keeps the job reconciler from
ever unsuspending a Kueue Job), and mirrors the TorchrunJob's `spec.suspend` into the Workload's
`spec.active` (found by Kueue's `kueue.x-k8s.io/job-uid` label). Suspend: the Workload is
deactivated, Kueue evicts it and keeps the Job suspended, the pods go, quota is released.
Resume: the Workload is reactivated and Kueue readmits and unsuspends the Job when quota allows.
Unsuspending stays Kueue's alone. The Workload is looked up (in the cache) only while either side
is suspended, so a running job costs nothing here; a Workload appearing enqueues its job (Kueue
makes it after the Job, and the cache may get it after the pass that looked).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from controller.api import (
    JOB_KIND,
    JOB_LABEL,
    JobTopology,
    Overridable,
    Scheduler,
    TorchrunJob,
    TorchrunQueue,
)
from controller.cache import Lister, OptionalInformers
from controller.errors import TransientError
from controller.meta import Resource, controller_of, is_controlled_by
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.torchrunjob.builders import labels, owner_reference
from controller.torchrunjob.scheduling import KAI_QUEUE_LABEL, pod_group_name

log = structlog.get_logger("podgroups")

KAI_POD_GROUPS = Resource("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup")
COSCHEDULING_POD_GROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
VOLCANO_POD_GROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
KUEUE_WORKLOADS = Resource("kueue.x-k8s.io", "v1beta1", "workloads", "Workload")
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
VOLCANO_DEFAULT_QUEUE = "default"

POD_GROUP_RESOURCES: dict[Scheduler, Resource] = {
    Scheduler.KAI: KAI_POD_GROUPS,
    Scheduler.COSCHEDULING: COSCHEDULING_POD_GROUPS,
    Scheduler.VOLCANO: VOLCANO_POD_GROUPS,
}
MISSING_API_RETRY = 30.0


# -- pure builders ------------------------------------------------------------------------------


def min_member(topo: JobTopology) -> int:
    """How many pods must be placed together: every node, or an elastic job's minimum."""
    return topo.min_nodes if topo.elastic else topo.nodes


def gang_priority(job: TorchrunJob, queue: TorchrunQueue) -> str | None:
    """The priority class of the gang: the pods' own (the queue's, or an allowed override)."""
    override = job.spec.overrides
    if (
        override is not None
        and override.priority_class_name
        and Overridable.PRIORITY_CLASS_NAME in queue.spec.allow_overrides
    ):
        return override.priority_class_name
    return queue.spec.scheduling.priority_class_name


def pod_group_spec(job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology) -> dict[str, Any]:
    """The fields of the PodGroup spec this controller owns, for the queue's scheduler."""
    scheduler = queue.spec.scheduling.scheduler
    spec: dict[str, Any] = {"minMember": min_member(topo)}
    if scheduler == Scheduler.KAI:
        spec["queue"] = queue.kai_queue_name
    elif scheduler == Scheduler.VOLCANO:
        spec["queue"] = VOLCANO_DEFAULT_QUEUE
    priority = gang_priority(job, queue)
    if priority and scheduler in (Scheduler.KAI, Scheduler.VOLCANO):  # coscheduling has no such field
        spec["priorityClassName"] = priority
    return spec


def build_pod_group(
    job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology
) -> tuple[Resource, dict[str, Any]] | None:
    """The job's PodGroup and where it lives, or None when its scheduler reads none."""
    resource = POD_GROUP_RESOURCES.get(queue.spec.scheduling.scheduler)
    if resource is None:
        return None
    meta_labels = labels(job, "worker")
    if queue.spec.scheduling.scheduler == Scheduler.KAI:
        meta_labels[KAI_QUEUE_LABEL] = queue.kai_queue_name
    manifest = {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {
            "name": pod_group_name(job),
            "namespace": job.namespace,
            "labels": meta_labels,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_group_spec(job, queue, topo),
    }
    return resource, manifest


def drift(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that brings the fields we own back to `desired` ({} when none differ)."""
    patch: dict[str, Any] = {}
    have_spec = existing.get("spec") or {}
    spec = {k: v for k, v in desired["spec"].items() if have_spec.get(k) != v}
    if spec:
        patch["spec"] = spec
    have_labels = existing["metadata"].get("labels") or {}
    want_labels = {k: v for k, v in desired["metadata"]["labels"].items() if have_labels.get(k) != v}
    if want_labels:
        patch["metadata"] = {"labels": want_labels}
    return patch


def workload_active_patch(workload: Mapping[str, Any], suspended: bool) -> dict[str, Any] | None:
    """The patch that makes a Kueue Workload's `spec.active` follow the job's suspend, if needed."""
    active = (workload.get("spec") or {}).get("active", True)
    if active is (not suspended):
        return None
    return {"spec": {"active": not suspended}}


# -- I/O ----------------------------------------------------------------------------------------


class PodGroups:
    """Makes a job's scheduler objects exist as the builders above describe (see module doc)."""

    def __init__(
        self, client: RESTClient, *, informers: OptionalInformers, worker_jobs: Lister | None = None
    ) -> None:
        self.client = client
        self.informers = informers
        self.worker_jobs = worker_jobs

    def ensure(self, job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology) -> None:
        built = build_pod_group(job, queue, topo)
        if built is not None:
            self._ensure_pod_group(job, *built)
        elif queue.spec.scheduling.scheduler == Scheduler.KUEUE:
            self._follow_suspend(job)

    # -- PodGroups --------------------------------------------------------------------------

    def _ensure_pod_group(self, job: TorchrunJob, resource: Resource, desired: dict[str, Any]) -> None:
        name = desired["metadata"]["name"]
        cache = self.informers.lister(resource, label_selector=JOB_LABEL)
        if cache is None:
            raise _not_served(resource)
        existing = cache.get(name, job.namespace)
        if existing is None:
            existing = self._create(job, resource, desired)
            if existing is None:
                return
        if not is_controlled_by(existing, job.metadata.uid):
            if _controlled_by_kind(existing, JOB_KIND):
                # rate-limited; its delete event (wiring.py) brings the job back sooner
                raise TransientError(
                    f"{resource.key} {job.namespace}/{name} belongs to an earlier job of that name "
                    "and is being deleted"
                )
            return  # someone else's PodGroup: used as it is, never changed
        patch = drift(existing, desired)
        if patch:
            self.client.patch(resource, name, patch, job.namespace)
            log.info("pod group updated", key=job.key, resource=resource.key, patch=patch)

    def _create(
        self, job: TorchrunJob, resource: Resource, desired: dict[str, Any]
    ) -> Mapping[str, Any] | None:
        """Create the PodGroup; None when created, else the one that exists (read fresh)."""
        try:
            self.client.create(resource, desired)
        except ApiError as exc:
            if exc.already_exists:
                return self._read(job, resource, desired["metadata"]["name"])
            if exc.not_found:  # the kind is not served (a namespace being deleted also lands here)
                raise _not_served(resource) from exc
            raise
        log.info("pod group created", key=job.key, resource=resource.key, spec=desired["spec"])
        return None

    def _read(self, job: TorchrunJob, resource: Resource, name: str) -> Mapping[str, Any]:
        try:
            return self.client.get(resource, name, job.namespace)
        except ApiError as exc:
            if exc.not_found:  # gone again since: a rate-limited retry creates it
                raise TransientError(f"{resource.key} {job.namespace}/{name} was deleted meanwhile") from exc
            raise

    # -- Kueue ------------------------------------------------------------------------------

    def _follow_suspend(self, job: TorchrunJob) -> None:
        worker = self.worker_jobs.get(job.name, job.namespace) if self.worker_jobs else None
        if worker is None or not is_controlled_by(worker, job.metadata.uid):
            return
        if not job.spec.suspend and not (worker.get("spec") or {}).get("suspend"):
            return  # admitted and running: nothing to mirror
        for workload in self._workloads_of(job, worker["metadata"]["uid"]):
            patch = workload_active_patch(workload, job.spec.suspend)
            if patch is None:
                continue
            name = workload["metadata"]["name"]
            self.client.patch(KUEUE_WORKLOADS, name, patch, job.namespace)
            log.info("kueue workload", key=job.key, workload=name, active=patch["spec"]["active"])

    def _workloads_of(self, job: TorchrunJob, worker_uid: str) -> list[Mapping[str, Any]]:
        cache = self.informers.lister(KUEUE_WORKLOADS)
        if cache is None:  # Kueue is not installed; the queue is not Ready then anyway
            return []
        return cache.list(job.namespace, {KUEUE_JOB_UID_LABEL: worker_uid})


def _not_served(resource: Resource) -> TransientError:
    return TransientError(
        f"the cluster does not serve {resource.key}; the job waits for it", requeue_after=MISSING_API_RETRY
    )


def _controlled_by_kind(obj: Mapping[str, Any], kind: str) -> bool:
    ref = controller_of(obj)
    return ref is not None and ref.get("kind") == kind
