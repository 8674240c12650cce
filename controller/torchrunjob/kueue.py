"""Kueue's admission switch: a job's suspend mirrored into its Kueue Workload (SPEC §5).

Kueue admits a Job by unsuspending it and, while its Workload stays admitted, unsuspends it again
whenever it finds it suspended; so setting `Job.spec.suspend` alone would fight Kueue over the
field. Kueue's own switch for "stop and do not readmit" is the Workload's `spec.active`. So the
controller writes `Job.spec.suspend` only towards true (the worker Job is created suspended and a
user's suspend sets it; `creates_suspended` keeps the job reconciler from ever unsuspending a
Kueue Job), and `KueueWorkloads.follow_suspend` mirrors the TorchrunJob's `spec.suspend` into the
Workload's `spec.active` (found by Kueue's `kueue.x-k8s.io/job-uid` label). Suspend: the Workload
is deactivated, Kueue evicts it and keeps the Job suspended, the pods go, quota is released.
Resume: the Workload is reactivated and Kueue readmits and unsuspends the Job when quota allows.
Unsuspending stays Kueue's alone. The Workload is looked up only while either side is suspended,
so a running job costs nothing here; a Workload appearing enqueues its job (Kueue makes it after
the Job, and the cache may get it after the pass that looked: `wiring.py`). `hold` quotes the
Workload's own words for why Kueue holds the worker Job back (`starting.kueue_hold`).

Reads come from caches, never from the API on a pass (SPEC §7): Kueue Workloads (Kueue's,
unlabelled by us) from an unselected `OptionalInformers` informer in the watched namespace,
started only once discovery shows the kind is served (Kueue may come after the controller), in
the newest version served (`api.kueue.workloads_served`: `v1beta2` on current Kueue, `v1beta1`
on 0.14).
"""

from __future__ import annotations

import structlog

from controller.api import Scheduler, TorchrunJob, TorchrunQueue
from controller.api.kueue import JOB_UID_LABEL, workloads_served
from controller.cache import Lister, OptionalInformers
from controller.meta import Obj, Resource, is_controlled_by
from controller.rest.client import RESTClient
from controller.torchrunjob.manifests.podgroup import workload_active_patch
from controller.torchrunjob.starting import kueue_hold

log = structlog.get_logger("podgroups")


class KueueWorkloads:
    """A job's Kueue Workloads, read from the cache, and the `spec.active` this side writes."""

    def __init__(
        self, client: RESTClient, *, informers: OptionalInformers, worker_jobs: Lister | None = None
    ) -> None:
        self.client = client
        self.informers = informers
        self.worker_jobs = worker_jobs

    def follow_suspend(self, job: TorchrunJob) -> None:
        worker = self.worker_jobs.get(job.name, job.namespace) if self.worker_jobs else None
        if worker is None or not is_controlled_by(worker, job.metadata.uid):
            return
        if not job.spec.suspend and not (worker.get("spec") or {}).get("suspend"):
            return  # admitted and running: nothing to mirror
        resource = workloads_served(self.informers.served)
        if resource is None:
            return  # Kueue is not installed: nothing holds the Job back
        for workload in self._workloads_of(resource, job, worker["metadata"]["uid"]):
            if _finished(workload):
                continue  # a slice Kueue replaced holds nothing, and is not ours to change
            patch = workload_active_patch(workload, job.spec.suspend)
            if patch is None:
                continue
            name = workload["metadata"]["name"]
            self.client.patch(resource, name, patch, job.namespace)
            log.info("kueue workload", key=job.key, workload=name, active=patch["spec"]["active"])

    def hold(self, job: TorchrunJob, queue: TorchrunQueue, worker: Obj) -> str | None:
        """Why Kueue holds the worker Job back, while it does: a Kueue queue's Job suspended
        although the TorchrunJob is not (`starting.kueue_hold`'s words, else that it waits)."""
        if not self._kueue_runs(job, queue) or not (worker.get("spec") or {}).get("suspend"):
            return None
        said = kueue_hold(self._workloads(job, worker))
        return said or f"Kueue has not admitted job {worker['metadata']['name']} yet"

    def held_growth(self, job: TorchrunJob, queue: TorchrunQueue, worker: Obj) -> str | None:
        """On a queue with `kueueWorkloadSlices`, the words of a growth's workload slice Kueue
        has not admitted yet (its pod waits behind Kueue's scheduling gate), while the Job runs."""
        if not self._kueue_runs(job, queue) or not queue.spec.kueue_workload_slices:
            return None
        if (worker.get("spec") or {}).get("suspend"):
            return None  # the whole Job waits: `hold`
        return kueue_hold(w for w in self._workloads(job, worker) if _pending_slice(w))

    @staticmethod
    def _kueue_runs(job: TorchrunJob, queue: TorchrunQueue) -> bool:
        return queue.spec.scheduling.scheduler == Scheduler.KUEUE and not job.spec.suspend

    def _workloads(self, job: TorchrunJob, worker: Obj) -> list[Obj]:
        resource = workloads_served(self.informers.served)
        return [] if resource is None else self._workloads_of(resource, job, worker["metadata"]["uid"])

    def _workloads_of(self, resource: Resource, job: TorchrunJob, worker_uid: str) -> list[Obj]:
        cache = self.informers.lister(resource)
        if cache is None:  # Kueue was removed since discovery looked
            return []
        return cache.list(job.namespace, {JOB_UID_LABEL: worker_uid})


def _finished(workload: Obj) -> bool:
    """Kueue's `Finished=True`: the job ended, or a newer slice replaced this one."""
    conditions = (workload.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Finished" and c.get("status") == "True" for c in conditions)


def _pending_slice(workload: Obj) -> bool:
    """A Workload Kueue has neither admitted nor finished (an older slice it replaced is Finished)."""
    return not (workload.get("status") or {}).get("admission") and not _finished(workload)
