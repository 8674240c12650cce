"""The Indexed Job `<job>` that runs torchrun on every node, built whole (pure, no I/O).

`build_worker_job(...)` returns the final manifest the controller creates — nothing is added to it
afterwards: one pod per node, hostnames `<job>-<index>` under `subdomain: <job>`, torchrun with the
launch of `launch.py` (rendezvous from `rendezvous.py`), resources and placement from the queue
(plus allowed overrides; a CPU-only queue requests no GPU resource), /dev/shm sized shmSizePerGPU ×
GPUs per node (a CPU-only node counts as one), success when index 0 succeeds, pod failures mapped
from `failurePolicy`; the scheduler's fields (`scheduling.scheduler_fields`), the storage
(`storage.worker_storage`), `/opt/torchrun` and the launch through it (`tools.worker_tools`),
checkpoints' environment, resume choice and grace period (`checkpoint.worker_checkpoint`), the
size (`parallelism`: an elastic job's current size, completions stay `maxNodes`), the whole-job
restart it belongs to and the workspace generation in use (annotations), whether it starts
suspended, the progress reporter sidecar (`progress.with_reporter`) and, for a job that restarts in
place, the supervisor's files (`inplace.with_in_place`). The pod asks for the
queue's `nodeResources` in all (`worker_requests`): what the controller's own containers request
comes out of the training container's share (`podresources.share_node`). Every container runs
with no privilege escalation and no capability, the pod with the RuntimeDefault seccomp profile,
under what the queue's `securityContext` says (`common.training_security_context`).

`worker_pod(worker_job)` is the pod the Job controller makes of it for index 0, as far as admission
can tell (name, labels, annotations, spec): what `pod_admission.py` asks the namespace about.
"""

from __future__ import annotations

from typing import Any

from controller.api import (
    GENERATION_ANNOTATION,
    QUEUE_LABEL,
    RESTART_ANNOTATION,
    EnvVar,
    JobTopology,
    Overridable,
    TorchrunJob,
    TorchrunQueue,
    to_json,
)
from controller.api.labels import WORKER_ROLE
from controller.api.quantity import Quantity
from controller.pods import COMPLETION_INDEX_ANNOTATION
from controller.torchrunjob.manifests.checkpoint import WorkerCheckpoint, worker_checkpoint
from controller.torchrunjob.manifests.common import (
    allowed,
    image_of,
    labels,
    node_rank_env,
    object_metadata,
    placement,
    training_security_context,
    worker_pod_security_context,
    working_dir_of,
)
from controller.torchrunjob.manifests.inplace import in_place_on, with_in_place
from controller.torchrunjob.manifests.launch import ParsedCommand, torchrun_args
from controller.torchrunjob.manifests.podresources import share_node
from controller.torchrunjob.manifests.progress import ReporterSettings, with_reporter
from controller.torchrunjob.manifests.rendezvous import DEFAULT_CLUSTER_DOMAIN, node0_host, rendezvous
from controller.torchrunjob.manifests.scheduling import SchedulerFields, scheduler_fields
from controller.torchrunjob.manifests.storage import DEFAULT_SYNC_IMAGE, WorkerStorage, worker_storage
from controller.torchrunjob.manifests.tools import WorkerTools, worker_tools

__all__ = ["CONTAINER", "build_worker_job", "worker_pod", "worker_requests"]
CONTAINER = "torchrun"
SHM_VOLUME = "dshm"


def _env(
    job: TorchrunJob,
    queue: TorchrunQueue,
    topo: JobTopology,
    parsed: ParsedCommand,
    cluster_domain: str,
    checkpoint: WorkerCheckpoint,
) -> list[dict[str, Any]]:
    rdzv = rendezvous(job, cluster_domain)
    ours: list[dict[str, Any]] = [
        {"name": "PET_NNODES", "value": topo.nnodes},
        {"name": "PET_NPROC_PER_NODE", "value": str(topo.procs_per_node)},
        node_rank_env("PET_NODE_RANK"),
        {"name": "PET_RDZV_BACKEND", "value": rdzv.backend},
        {"name": "PET_RDZV_ENDPOINT", "value": rdzv.endpoint},
        {"name": "PET_RDZV_ID", "value": rdzv.run_id},
        {"name": "PET_MAX_RESTARTS", "value": str(job.spec.distributed.max_restarts)},
        {"name": "MASTER_ADDR", "value": node0_host(job, cluster_domain)},
        {"name": "MASTER_PORT", "value": str(job.spec.distributed.rdzv_port)},
        {"name": "WORLD_SIZE", "value": str(topo.world_size)},
        {"name": "TORCH_DISTRIBUTED_BACKEND", "value": job.spec.distributed.backend.value},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "TORCHRUN_JOB_NAME", "value": job.name},
        *checkpoint.env,
    ]
    merged: dict[str, dict[str, Any]] = {}
    user: list[EnvVar] = list(queue.spec.env)
    if allowed(job, queue, Overridable.ENV) and job.spec.overrides is not None:
        user += list(job.spec.overrides.env)
    for var in user:
        merged[var.name] = to_json(var)
    for name, value in parsed.env.items():
        merged[name] = {"name": name, "value": value}
    reserved = {e["name"] for e in ours}
    return ours + [v for name, v in merged.items() if name not in reserved]


def worker_requests(queue: TorchrunQueue, topo: JobTopology) -> dict[str, str]:
    """What one worker pod asks for in all: the queue's node shape (the training container gets it
    less what the controller's containers beside it request: `podresources.share_node`)."""
    nr = queue.spec.node_resources
    amounts: dict[str, str] = {}
    if topo.gpus_per_node:
        amounts[nr.gpu_resource_name] = str(topo.gpus_per_node)
    if nr.cpus is not None:
        amounts["cpu"] = str(nr.cpus)
    if nr.memory is not None:
        amounts["memory"] = str(nr.memory)
    return amounts


def _pod_failure_policy(job: TorchrunJob) -> dict[str, Any]:
    fp = job.spec.failure_policy
    rules: list[dict[str, Any]] = [
        # node drained, preempted or lost: not the training's fault, never counted
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
    if fp.permanent_exit_codes:
        rules.append(
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": CONTAINER,
                    "operator": "In",
                    "values": sorted(fp.permanent_exit_codes),
                },
            }
        )
    if fp.retriable_exit_codes:
        rules.append(
            {
                "action": "Ignore",
                "onExitCodes": {
                    "containerName": CONTAINER,
                    "operator": "In",
                    "values": sorted(fp.retriable_exit_codes),
                },
            }
        )
    return {"rules": rules}


def _container(
    job: TorchrunJob,
    queue: TorchrunQueue,
    topo: JobTopology,
    parsed: ParsedCommand,
    cluster_domain: str,
    tools: WorkerTools,
    checkpoint: WorkerCheckpoint,
) -> dict[str, Any]:
    """The torchrun container, launched through `/opt/torchrun/launch`, without the mounts or its
    resources (its share of the node: `podresources.share_node`)."""
    return {
        "name": CONTAINER,
        "image": image_of(job, queue),
        "workingDir": working_dir_of(job, queue),
        "command": list(tools.command),
        "args": torchrun_args(
            parsed,
            nnodes=topo.nnodes,
            nproc_per_node=topo.procs_per_node,
            rendezvous=rendezvous(job, cluster_domain),
            max_restarts=job.spec.distributed.max_restarts,
        ),
        "env": _env(job, queue, topo, parsed, cluster_domain, checkpoint),
        "ports": [{"name": "rendezvous", "containerPort": job.spec.distributed.rdzv_port, "protocol": "TCP"}],
        "securityContext": training_security_context(queue),
    }


def _pod_spec(
    job: TorchrunJob,
    queue: TorchrunQueue,
    container: dict[str, Any],
    storage: WorkerStorage,
    tools: WorkerTools,
    checkpoint: WorkerCheckpoint,
    sched: SchedulerFields,
    shm: str,
) -> dict[str, Any]:
    spec = queue.spec
    shm_mount = {"name": SHM_VOLUME, "mountPath": "/dev/shm"}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": job.name,
        "securityContext": worker_pod_security_context(),
        "containers": [{**container, "volumeMounts": [shm_mount, tools.mount, *storage.mounts]}],
        "volumes": [
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
            tools.volume,
            *storage.volumes,
        ],
        "initContainers": [tools.init_container, *storage.init_containers],
        "terminationGracePeriodSeconds": checkpoint.termination_grace_period_seconds,
        **placement(job, queue),
    }
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [to_json(s) for s in spec.image_pull_secrets]
    if spec.service_account_name:
        pod["serviceAccountName"] = spec.service_account_name
    if sched.scheduler_name:
        pod["schedulerName"] = sched.scheduler_name
    if sched.pod_scheduling_gates:
        pod["schedulingGates"] = [{"name": gate} for gate in sched.pod_scheduling_gates]
    return pod


def _pod_metadata(job: TorchrunJob, queue: TorchrunQueue, sched: SchedulerFields) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "labels": {
            **queue.spec.pod_labels,
            **labels(job, WORKER_ROLE),
            QUEUE_LABEL: queue.name,
            **sched.pod_labels,
        }
    }
    annotations = {**queue.spec.pod_annotations, **sched.pod_annotations}
    if annotations:
        meta["annotations"] = annotations
    return meta


def _job_metadata(
    job: TorchrunJob, sched: SchedulerFields, *, restart: int, generation: int
) -> dict[str, Any]:
    meta = object_metadata(job, job.name, WORKER_ROLE)
    meta["labels"].update(sched.job_labels)
    meta["annotations"] = {
        RESTART_ANNOTATION: str(restart),
        **sched.job_annotations,
        GENERATION_ANNOTATION: str(generation),
    }
    return meta


def build_worker_job(
    job: TorchrunJob,
    queue: TorchrunQueue,
    topo: JobTopology,
    parsed: ParsedCommand,
    *,
    restart: int = 0,
    suspend: bool = False,
    parallelism: int | None = None,
    generation: int = 0,
    sync_image: str = DEFAULT_SYNC_IMAGE,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
    reporter: ReporterSettings | None = None,
) -> dict[str, Any]:
    """The worker Job of whole-job restart `restart`, whole (module doc). `parallelism` is an
    elastic job's current size (default: `topo.nodes`); `generation` is the workspace generation
    in use; `sync_image` runs the init containers, `prepare` and the code copy (the queue's
    `syncImage` wins)."""
    sched = scheduler_fields(job, queue)
    image = queue.spec.sync_image or sync_image
    storage = worker_storage(job, queue, generation=generation, image=image)
    checkpoint = worker_checkpoint(job, queue, restart=restart)
    tools = worker_tools(queue, image=image, inputs=checkpoint.prepare)
    shm = str(queue.spec.storage.shm_size_per_gpu * topo.gpu_slots_per_node)
    container = _container(job, queue, topo, parsed, cluster_domain, tools, checkpoint)
    pod = _pod_spec(job, queue, container, storage, tools, checkpoint, sched, shm)
    reporter = reporter or ReporterSettings()
    pod = with_reporter(pod, job, queue, image=image, settings=reporter, container=CONTAINER)
    if in_place_on(job, reporter):
        pod = with_in_place(pod, job, CONTAINER)
    shape = {name: Quantity.parse(amount) for name, amount in worker_requests(queue, topo).items()}
    pod = share_node(pod, shape, CONTAINER)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _job_metadata(job, sched, restart=restart, generation=generation),
        "spec": {
            "completionMode": "Indexed",
            "completions": topo.max_nodes if topo.elastic else topo.nodes,
            "parallelism": topo.nodes if parallelism is None else parallelism,
            "backoffLimitPerIndex": job.spec.failure_policy.backoff_limit_per_node,
            "maxFailedIndexes": 0,
            "podFailurePolicy": _pod_failure_policy(job),
            "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
            "suspend": suspend,
            "template": {
                "metadata": _pod_metadata(job, queue, sched),
                "spec": pod,
            },
        },
    }


def worker_pod(worker_job: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """The pod of `worker_job` (as `build_worker_job` made it) for completion index `index`, named
    `<job>-<index>` (the Job controller adds a random suffix) with the completion index the Job
    controller adds; no owner (a dry run needs none)."""
    meta = worker_job["metadata"]
    template = worker_job["spec"]["template"]
    name = f"{meta['name']}-{index}"
    annotations = {**(template["metadata"].get("annotations") or {}), COMPLETION_INDEX_ANNOTATION: str(index)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {**template["metadata"]["labels"], COMPLETION_INDEX_ANNOTATION: str(index)},
            "annotations": annotations,
        },
        "spec": {**template["spec"], "hostname": name},
    }
