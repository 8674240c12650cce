"""Workers: the worker Job of the job's current attempt exists, at its size, and is read back.

What `Workers.ensure` guarantees (a step, `steps.py`), through `Children` (a same-named Job the
job does not control is a `wait` with `Admitted=False NameConflict`, never touched):
- a worker Job of an earlier attempt (a whole-job restart or a disruption: its restart
  annotation differs) is deleted first: `wait` with `Running=False Restarting`; its deletion
  event brings the job back to create the next one;
- no worker Job is created before the rendezvous' managed etcd is Ready (`Running=False` with
  the etcd's reason meanwhile); one that exists is not held back by an etcd being replaced;
- the Job is created as `manifests/worker.py` builds it, whole: an elastic job at the size the
  autoscaler chose (`elastic.desired_nodes`), the workspace generation in use, suspended when
  the job is or its scheduler admits by unsuspending (Kueue) — and only once the namespace would
  admit its pods (`pod_admission.py`: one server-side dry run per attempt); until then a `wait`
  with `Admitted=False PodsForbidden` saying why, looked at again after `pod_admission.RECHECK`;
- an existing Job follows the job's `suspend` (only towards true on Kueue: unsuspending is
  Kueue's) and an elastic job's size (`ElasticSize.resize`);
- the answer is `Proceed(Attempt)`: the Job as cached or created, the topology at its size, and
  what its rank 0's `prepare` container reported about checkpoints (`checkpoints.py`).
`Attempt.pods` are the cached pods the worker Job controls, listed once per pass: the pass counts
the workers, their retriable failures and the scheduler's words for them from these, and the
progress step (`progress.py`) and hot reload (`reload.py`) read them too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from controller.api import (
    JOB_LABEL,
    CheckpointStatus,
    JobConditionType,
    JobTopology,
    TorchrunJob,
    TorchrunJobStatus,
    TorchrunQueue,
)
from controller.api.reasons import Reason
from controller.cache import Lister
from controller.meta import Obj, is_controlled_by
from controller.rest.client import RESTClient
from controller.rest.resources import JOBS
from controller.torchrunjob import status as st
from controller.torchrunjob.admission import Admission
from controller.torchrunjob.checkpoints import checkpoint_status
from controller.torchrunjob.children import Children
from controller.torchrunjob.elastic import ElasticSize, desired_nodes
from controller.torchrunjob.manifests.common import restart_of
from controller.torchrunjob.manifests.etcd import EtcdState
from controller.torchrunjob.manifests.progress import ReporterSettings
from controller.torchrunjob.manifests.rendezvous import DEFAULT_CLUSTER_DOMAIN
from controller.torchrunjob.manifests.scheduling import creates_suspended
from controller.torchrunjob.manifests.storage import DEFAULT_SYNC_IMAGE
from controller.torchrunjob.manifests.worker import build_worker_job
from controller.torchrunjob.pod_admission import PodAdmission
from controller.torchrunjob.steps import Observed, Proceed, Step, wait
from controller.torchrunjob.updater import JobUpdater


@dataclass(frozen=True)
class Attempt:
    """The worker Job of the current attempt, the job's topology at its current size, its queue,
    and the checkpoints its rank 0 reported at its start (None until it has: `checkpoints.py`)."""

    job: Obj
    topology: JobTopology
    queue: TorchrunQueue
    checkpoint: CheckpointStatus | None = None
    pods: tuple[Obj, ...] = ()  # the cached pods the worker Job controls

    def observed(self, status: TorchrunJobStatus) -> dict[str, Any]:
        """The status fields this attempt sets (`status.checkpoint` stays until rank 0 reports)."""
        return {
            "nodes": self.topology.nodes,
            "gpus": self.topology.total_gpus,
            "workers": st.worker_counts(self.job, self.pods),
            "checkpoint": self.checkpoint or status.checkpoint,
        }


@dataclass(frozen=True)
class WorkerSettings:
    sync_image: str = DEFAULT_SYNC_IMAGE
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    reporter: ReporterSettings = dataclasses.field(default_factory=ReporterSettings)


class Workers:
    def __init__(
        self, client: RESTClient, children: Children, pods: Lister, settings: WorkerSettings
    ) -> None:
        self.client = client
        self.children = children
        self.pods = pods
        self.elastic = ElasticSize(client, pods)
        self.settings = settings
        self.pod_admission = PodAdmission(client)

    def ensure(
        self,
        job: TorchrunJob,
        admission: Admission,
        status: TorchrunJobStatus,
        etcd: EtcdState,
        updater: JobUpdater,
    ) -> Step[Attempt]:
        existing = self.children.get(JOBS, job)
        restart = status.attempt  # restarts in place keep the worker Job
        if (
            existing is not None
            and is_controlled_by(existing, job.metadata.uid)
            and restart_of(existing) != restart
        ):
            self.children.delete(JOBS, job)
            message = f"attempt {restart}: waiting for the previous workers to stop"
            return wait(Observed(JobConditionType.RUNNING, False, Reason.RESTARTING, message))
        if existing is None and not etcd.ready:
            return wait(Observed(JobConditionType.RUNNING, False, etcd.reason, etcd.message))
        size = desired_nodes(job, admission.topology)
        manifest = None if existing is not None else self.manifest(job, admission, status, size)
        if manifest is not None:
            refused = self.pod_admission.check(job, admission.queue, manifest, updater)
            if refused is not None:
                condition = Observed(JobConditionType.ADMITTED, False, Reason.PODS_FORBIDDEN, refused.message)
                return wait(condition, requeue_after=self.pod_admission.retry_in(refused))
        got = self.children.ensure_built(
            JOBS, job, job.name, lambda: manifest or self.manifest(job, admission, status, size)
        )
        if not isinstance(got, Proceed):
            return got
        if got.value is existing:
            self._follow(job, admission.queue, got.value, size)
        topology = dataclasses.replace(admission.topology, nodes=size)
        pods = self.pods.list(job.namespace, {JOB_LABEL: job.name})
        uid = got.value["metadata"].get("uid", "")
        checkpoint = checkpoint_status(pods, uid)
        mine = tuple(p for p in pods if is_controlled_by(p, uid))
        return Proceed(Attempt(got.value, topology, admission.queue, checkpoint, mine))

    def manifest(
        self, job: TorchrunJob, admission: Admission, status: TorchrunJobStatus, size: int
    ) -> dict[str, Any]:
        """The worker Job of the job's current attempt, whole (`manifests/worker.py`)."""
        return build_worker_job(
            job,
            admission.queue,
            admission.topology,
            admission.command,
            restart=status.attempt,
            suspend=job.spec.suspend or creates_suspended(admission.queue),
            parallelism=size,
            generation=status.workspace_generation,
            sync_image=self.settings.sync_image,
            cluster_domain=self.settings.cluster_domain,
            reporter=self.settings.reporter,
        )

    def _follow(self, job: TorchrunJob, queue: TorchrunQueue, worker_job: Obj, size: int) -> None:
        """`suspend` and an elastic job's size are the fields of the worker Job we change after
        creating it (the pod template is immutable: `numNodes` cannot change, see the CRD)."""
        have = bool((worker_job.get("spec") or {}).get("suspend"))
        if job.spec.suspend and not have:
            self.client.patch(JOBS, job.name, {"spec": {"suspend": True}}, job.namespace)
        elif not job.spec.suspend and have and not creates_suspended(queue):
            self.client.patch(JOBS, job.name, {"spec": {"suspend": False}}, job.namespace)
        if job.spec.elastic is not None:
            self.elastic.resize(job, worker_job, size)
