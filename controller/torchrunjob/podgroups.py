"""A job's gang: the PodGroup its scheduler reads (SPEC §5); for Kueue, its admission switch.

What `PodGroups.ensure(job, queue, topo)` guarantees, called before the worker Job is made:

- kai-scheduler, coscheduling, volcano: one PodGroup `<job>` in the job's namespace, of the
  scheduler's own kind (`scheduling.run.ai/v2alpha2`, `scheduling.x-k8s.io/v1alpha1`,
  `scheduling.volcano.sh/v1beta1`), owned by the TorchrunJob (it goes when the job goes),
  labelled `torchrun-job-name`/`torchrun.ai/role: worker`, with `minMember` = the nodes the job
  needs to start (`elastic.minNodes` for elastic jobs) and, where the kind has them, the queue
  and the priority class of the pods. It exists before any pod does, so no pod is ever scheduled
  outside its gang. Only the fields written here are patched when they drift; the schedulers'
  status and their own fields are never touched. The pods join it through the label or
  annotation of `manifests/scheduling.py`; the PodGroup itself is built in
  `manifests/podgroup.py`.
- The answer is a step (`steps.py`). A PodGroup of the same name that the job does not control
  is a `wait` with `Admitted=False NameConflict` naming it: one owned by an earlier TorchrunJob of
  the same name is waited out (the garbage collector is removing it; its delete event brings the
  job back at once), one created by someone else is never used, changed or deleted — a gang the
  job does not own could hold any pods. Both retry with backoff.
- A PodGroup kind the cluster does not serve is a `wait` with `Admitted=False
  SchedulerAPIMissing` (looked at again in 30 s), never a crash: the queue controller turns the
  same fact into `Ready=False`, which then holds the job back with `QueueNotReady`.

Reads come from caches, never from the API on a pass (SPEC §7): PodGroups from an informer per
kind narrowed by the `torchrun-job-name` label (`OptionalInformers`: started only once
discovery shows the kind is served; the CRDs may come after the controller). A PodGroup missing
from the cache is created through `Children` (the job controller's one create-or-adopt path): if
the API answers AlreadyExists (the cache lags our own create, or the PodGroup is someone else's
and lacks our label) it is read once, fresh, and handled as above.
PodGroup events enqueue the job that controls them (`wiring.py`), so drift and the earlier job's
PodGroup going away are noticed without polling.

A Kueue queue's jobs have no PodGroup: `ensure` mirrors the job's suspend into its Kueue
Workload instead (`kueue.py`).
"""

from __future__ import annotations

from typing import Any

import structlog

from controller.api import JOB_LABEL, JobConditionType, JobTopology, Scheduler, TorchrunJob, TorchrunQueue
from controller.api.reasons import Reason
from controller.cache import OptionalInformers
from controller.meta import Resource
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.torchrunjob.children import Children
from controller.torchrunjob.kueue import KueueWorkloads
from controller.torchrunjob.manifests.podgroup import build_pod_group, drift
from controller.torchrunjob.steps import Decision, Observed, Proceed, Step, wait

log = structlog.get_logger("podgroups")
MISSING_API_RETRY = 30.0


class PodGroups:
    """Makes a job's scheduler objects exist as the builders above describe (see module doc)."""

    def __init__(self, client: RESTClient, *, informers: OptionalInformers, kueue: KueueWorkloads) -> None:
        self.client = client
        self.informers = informers
        self.kueue = kueue

    def ensure(self, job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology) -> Step[None]:
        built = build_pod_group(job, queue, topo)
        if built is not None:
            return self._ensure_pod_group(job, *built)
        if queue.spec.scheduling.scheduler == Scheduler.KUEUE:
            self.kueue.follow_suspend(job)
        return Proceed(None)

    # -- PodGroups --------------------------------------------------------------------------

    def _ensure_pod_group(self, job: TorchrunJob, resource: Resource, desired: dict[str, Any]) -> Step[None]:
        name = desired["metadata"]["name"]
        cache = self.informers.lister(resource, label_selector=JOB_LABEL)
        if cache is None:
            return _not_served(resource)
        try:
            got = Children(self.client, {resource: cache}).ensure(resource, job, desired)
        except ApiError as exc:
            if exc.not_found:  # the kind is not served (a namespace being deleted also lands here)
                return _not_served(resource)
            raise
        if not isinstance(got, Proceed):
            return got
        patch = drift(got.value, desired)
        if patch:
            self.client.patch(resource, name, patch, job.namespace)
            log.info("pod group updated", key=job.key, resource=resource.key, patch=patch)
        return Proceed(None)


def _not_served(resource: Resource) -> Decision:
    message = (
        f"the cluster does not serve {resource.key}, which the queue's scheduler needs; the job waits for it"
    )
    condition = Observed(JobConditionType.ADMITTED, False, Reason.SCHEDULER_API_MISSING, message)
    return wait(condition, requeue_after=MISSING_API_RETRY)
