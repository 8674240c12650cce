"""What each scheduler needs on a job's pods, and the gang objects it reads (pure, SPEC §5).

- default: nothing; kube-scheduler places pods one by one.
- kai-scheduler: `schedulerName: kai-scheduler`, label `kai.scheduler/queue`, and a PodGroup
  (`scheduling.run.ai/v2alpha2`, minMember = nodes) the pods name in annotation `pod-group-name`:
  KAI's own pod-grouper would give a plain Job one group per pod, which is no gang.
- kueue: label `kueue.x-k8s.io/queue-name` on the Job, which is created suspended; Kueue admits
  it by unsuspending it.
- coscheduling: a scheduler-plugins PodGroup (`scheduling.x-k8s.io/v1alpha1`), pods labelled
  `scheduling.x-k8s.io/pod-group`.
- volcano: `schedulerName: volcano`, a Volcano PodGroup (`scheduling.volcano.sh/v1beta1`), pods
  annotated `scheduling.k8s.io/group-name`.
"""

from __future__ import annotations

from typing import Any

from controller.api import JobTopology, Scheduler, TorchrunJob, TorchrunQueue

KAI_QUEUE_LABEL = "kai.scheduler/queue"
KAI_POD_GROUP_ANNOTATION = "pod-group-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"


def pod_group_name(job: TorchrunJob) -> str:
    return job.name


def apply_scheduler(
    manifest: dict[str, Any], job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology
) -> None:
    """Add the scheduler's fields to a worker Job manifest built for `queue`."""
    template = manifest["spec"]["template"]
    meta = template["metadata"]
    pod_spec = template["spec"]
    scheduler = queue.spec.scheduling.scheduler
    if scheduler == Scheduler.KAI:
        pod_spec["schedulerName"] = "kai-scheduler"
        meta["labels"][KAI_QUEUE_LABEL] = queue.kai_queue_name
        meta.setdefault("annotations", {})[KAI_POD_GROUP_ANNOTATION] = pod_group_name(job)
        manifest["metadata"]["labels"][KAI_QUEUE_LABEL] = queue.kai_queue_name
    elif scheduler == Scheduler.KUEUE:
        manifest["metadata"]["labels"][KUEUE_QUEUE_LABEL] = queue.kueue_queue_name
    elif scheduler == Scheduler.COSCHEDULING:
        meta["labels"][COSCHEDULING_LABEL] = pod_group_name(job)
    elif scheduler == Scheduler.VOLCANO:
        pod_spec["schedulerName"] = "volcano"
        meta.setdefault("annotations", {})[VOLCANO_ANNOTATION] = pod_group_name(job)


def creates_suspended(queue: TorchrunQueue) -> bool:
    """Kueue admits a Job by unsuspending it, so the Job must start suspended."""
    return queue.spec.scheduling.scheduler == Scheduler.KUEUE
