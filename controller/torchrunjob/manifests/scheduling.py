"""What each scheduler needs on a job's worker Job and pods (pure, SPEC §5).

Every name below was checked against the scheduler's own source:

- default: nothing; kube-scheduler places pods one by one.
- kai-scheduler: `schedulerName: kai-scheduler`; label `kai.scheduler/queue` (KAI's queue label
  key) on the Job and its pods; annotation `pod-group-name` on the pods (KAI's
  `PodGroupAnnotationForPod`: the scheduler core finds a pod's gang through it) naming the
  PodGroup this controller creates (`podgroups.py`); and `kai.scheduler/skip-podgrouper: "true"`
  on the Job and on the pods, KAI's contract for externally created PodGroups: without it KAI's
  pod-grouper rewrites `pod-group-name` to a group of its own, one per pod or one per Job with
  `minMember: 1` depending on the version — no gang either way.
- kueue: label `kueue.x-k8s.io/queue-name` on the Job (Kueue's `QueueLabel`); the Job is created
  suspended and Kueue admits it by unsuspending it (see `kueue.py` for how a user's suspend
  and Kueue's admission stay out of each other's way). A queue's `kueueTopology` puts Kueue's
  `kueue.x-k8s.io/podset-required-topology` (or `-preferred-`) annotation on the pod template:
  Kueue's topology-aware scheduling then admits the job into one domain of that level, gates
  its pods and ungates each with a node selector inside the domain. A queue with
  `kueueWorkloadSlices` (its Kueue runs ElasticJobsViaWorkloadSlices) marks an elastic job's Job
  `kueue.x-k8s.io/elastic-job: "true"` and gates its pods with Kueue's `kueue.x-k8s.io/elastic-job`
  scheduling gate (what Kueue's Job webhook adds), so a pod of a growth waits until Kueue admits
  the new workload slice.
- coscheduling (scheduler-plugins): pods labelled `scheduling.x-k8s.io/pod-group` (its
  `PodGroupLabel`) and `schedulerName: scheduler-plugins-scheduler`, the name scheduler-plugins'
  own "as a second scheduler" install gives its profile with the Coscheduling plugin: kube-scheduler
  keeps every other pod, and a gang's pods are never split between two schedulers (kube-scheduler
  knows no PodGroup and would place them one by one). A cluster's scheduler-plugins must serve its
  Coscheduling profile under this name (the chart's default): the name is the contract.
- volcano: `schedulerName: volcano`; pods annotated `scheduling.k8s.io/group-name` (Volcano's
  `KubeGroupNameAnnotationKey`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.api import Scheduler, TorchrunJob, TorchrunQueue
from controller.api.kueue import (
    ELASTIC_JOB_ANNOTATION,
    ELASTIC_JOB_GATE,
    PREFERRED_TOPOLOGY_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
)
from controller.api.kueue import QUEUE_LABEL as KUEUE_QUEUE_LABEL

KAI_SCHEDULER_NAME = "kai-scheduler"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
KAI_POD_GROUP_ANNOTATION = "pod-group-name"
KAI_SKIP_POD_GROUPER_ANNOTATION = "kai.scheduler/skip-podgrouper"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
COSCHEDULING_SCHEDULER_NAME = "scheduler-plugins-scheduler"
VOLCANO_SCHEDULER_NAME = "volcano"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"


def pod_group_name(job: TorchrunJob) -> str:
    """The job's PodGroup: one per job, named after it, kept across whole-job restarts."""
    return job.name


@dataclass(frozen=True)
class SchedulerFields:
    """What the queue's scheduler adds to a worker Job: labels and annotations on the Job and on
    its pods, the pods' `schedulerName` (None: the cluster's default) and scheduling gates."""

    job_labels: Mapping[str, str] = field(default_factory=dict)
    job_annotations: Mapping[str, str] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None
    pod_scheduling_gates: tuple[str, ...] = ()


def scheduler_fields(job: TorchrunJob, queue: TorchrunQueue) -> SchedulerFields:
    """The fields the queue's scheduler needs on the job's worker Job (module doc)."""
    scheduler = queue.spec.scheduling.scheduler
    group = pod_group_name(job)
    if scheduler == Scheduler.KAI:
        queue_label = {KAI_QUEUE_LABEL: queue.kai_queue_name}
        skip = {KAI_SKIP_POD_GROUPER_ANNOTATION: "true"}
        return SchedulerFields(
            job_labels=queue_label,
            job_annotations=skip,
            pod_labels=queue_label,
            pod_annotations={**skip, KAI_POD_GROUP_ANNOTATION: group},
            scheduler_name=KAI_SCHEDULER_NAME,
        )
    if scheduler == Scheduler.KUEUE:
        sliced = queue.spec.kueue_workload_slices and job.spec.elastic is not None
        return SchedulerFields(
            job_labels={KUEUE_QUEUE_LABEL: queue.kueue_queue_name},
            job_annotations={ELASTIC_JOB_ANNOTATION: "true"} if sliced else {},
            pod_annotations=kueue_topology(queue),
            pod_scheduling_gates=(ELASTIC_JOB_GATE,) if sliced else (),
        )
    if scheduler == Scheduler.COSCHEDULING:
        return SchedulerFields(
            pod_labels={COSCHEDULING_LABEL: group}, scheduler_name=COSCHEDULING_SCHEDULER_NAME
        )
    if scheduler == Scheduler.VOLCANO:
        return SchedulerFields(
            pod_annotations={VOLCANO_ANNOTATION: group}, scheduler_name=VOLCANO_SCHEDULER_NAME
        )
    return SchedulerFields()


def creates_suspended(queue: TorchrunQueue) -> bool:
    """Kueue admits a Job by unsuspending it, so the Job must start suspended."""
    return queue.spec.scheduling.scheduler == Scheduler.KUEUE


def kueue_topology(queue: TorchrunQueue) -> dict[str, str]:
    """Kueue's topology annotation for the worker pods, when the queue asks for one."""
    topology = queue.spec.kueue_topology
    if topology is None:
        return {}
    if topology.required:
        return {REQUIRED_TOPOLOGY_ANNOTATION: topology.required}
    return {PREFERRED_TOPOLOGY_ANNOTATION: topology.preferred} if topology.preferred else {}
