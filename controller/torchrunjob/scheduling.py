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
  suspended and Kueue admits it by unsuspending it (see `podgroups.py` for how a user's suspend
  and Kueue's admission stay out of each other's way).
- coscheduling (scheduler-plugins): pods labelled `scheduling.x-k8s.io/pod-group` (its
  `PodGroupLabel`). The pods keep the cluster's default scheduler name: scheduler-plugins is run
  as, or in place of, the default scheduler.
- volcano: `schedulerName: volcano`; pods annotated `scheduling.k8s.io/group-name` (Volcano's
  `KubeGroupNameAnnotationKey`).
"""

from __future__ import annotations

from typing import Any

from controller.api import JobTopology, Scheduler, TorchrunJob, TorchrunQueue

KAI_SCHEDULER_NAME = "kai-scheduler"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
KAI_POD_GROUP_ANNOTATION = "pod-group-name"
KAI_SKIP_POD_GROUPER_ANNOTATION = "kai.scheduler/skip-podgrouper"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_SCHEDULER_NAME = "volcano"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"


def pod_group_name(job: TorchrunJob) -> str:
    """The job's PodGroup: one per job, named after it, kept across whole-job restarts."""
    return job.name


def apply_scheduler(
    manifest: dict[str, Any], job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology
) -> None:
    """Add the scheduler's fields to a worker Job manifest built for `queue`."""
    job_meta = manifest["metadata"]
    template = manifest["spec"]["template"]
    pod_meta = template["metadata"]
    pod_spec = template["spec"]
    scheduler = queue.spec.scheduling.scheduler
    if scheduler == Scheduler.KAI:
        pod_spec["schedulerName"] = KAI_SCHEDULER_NAME
        for meta in (job_meta, pod_meta):
            meta.setdefault("labels", {})[KAI_QUEUE_LABEL] = queue.kai_queue_name
            meta.setdefault("annotations", {})[KAI_SKIP_POD_GROUPER_ANNOTATION] = "true"
        pod_meta["annotations"][KAI_POD_GROUP_ANNOTATION] = pod_group_name(job)
    elif scheduler == Scheduler.KUEUE:
        job_meta.setdefault("labels", {})[KUEUE_QUEUE_LABEL] = queue.kueue_queue_name
    elif scheduler == Scheduler.COSCHEDULING:
        pod_meta.setdefault("labels", {})[COSCHEDULING_LABEL] = pod_group_name(job)
    elif scheduler == Scheduler.VOLCANO:
        pod_spec["schedulerName"] = VOLCANO_SCHEDULER_NAME
        pod_meta.setdefault("annotations", {})[VOLCANO_ANNOTATION] = pod_group_name(job)


def creates_suspended(queue: TorchrunQueue) -> bool:
    """Kueue admits a Job by unsuspending it, so the Job must start suspended."""
    return queue.spec.scheduling.scheduler == Scheduler.KUEUE
