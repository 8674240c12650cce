"""Pure builders: a TorchrunJob and its queue in, the manifests of SPEC §4 out (no I/O).

Names and labels are API: every object carries `torchrun-job-name=<job>` and `torchrun.ai/role`,
an owner reference to the TorchrunJob, and is written with field manager `torchrun-controller`.
- `build_service`: the headless Service `<job>` (publishNotReadyAddresses, so rank 0 resolves
  before it is ready — the rendezvous needs exactly that).
- `build_worker_job`: the Indexed Job `<job>`: one pod per node, hostnames `<job>-<index>` under
  `subdomain: <job>`, torchrun with the launch of `launch.py` (rendezvous from `rendezvous.py`),
  resources and placement from the queue (plus allowed overrides; a CPU-only queue requests no
  GPU resource), /dev/shm sized shmSizePerGPU × GPUs per node (a CPU-only node counts as one),
  success when index 0 succeeds, pod failures mapped from `failurePolicy`.
The managed etcd of etcd-v2 rendezvous is built in `etcd.py`.
"""

from __future__ import annotations

from typing import Any

from controller.api import (
    JOB_KIND,
    JOB_LABEL,
    QUEUE_LABEL,
    ROLE_LABEL,
    EnvVar,
    JobTopology,
    Overridable,
    TorchrunJob,
    TorchrunQueue,
    to_json,
)
from controller.api.resources import controller_reference
from controller.torchrunjob.launch import ParsedCommand, torchrun_args
from controller.torchrunjob.rendezvous import DEFAULT_CLUSTER_DOMAIN, node0_host, rendezvous
from controller.torchrunjob.scheduling import apply_scheduler

RESTART_ANNOTATION = "torchrun.ai/restart"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
CONTAINER = "torchrun"
SHM_VOLUME = "dshm"


def labels(job: TorchrunJob, role: str) -> dict[str, str]:
    return {JOB_LABEL: job.name, ROLE_LABEL: role}


def owner_reference(job: TorchrunJob) -> dict[str, Any]:
    return controller_reference(JOB_KIND, job.name, job.metadata.uid)


def object_metadata(job: TorchrunJob, name: str, role: str) -> dict[str, Any]:
    """Name, namespace, our labels and the controller owner reference of an object of `job`."""
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": labels(job, role),
        "ownerReferences": [owner_reference(job)],
    }


def build_service(job: TorchrunJob) -> dict[str, Any]:
    port = job.spec.distributed.rdzv_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(job, job.name, "worker"),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": labels(job, "worker"),
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def _allowed(job: TorchrunJob, queue: TorchrunQueue, field: Overridable) -> bool:
    return job.spec.overrides is not None and field in queue.spec.allow_overrides


def _env(
    job: TorchrunJob, queue: TorchrunQueue, topo: JobTopology, parsed: ParsedCommand, cluster_domain: str
) -> list[dict[str, Any]]:
    rdzv = rendezvous(job, cluster_domain)
    ours: list[dict[str, Any]] = [
        {"name": "PET_NNODES", "value": topo.nnodes},
        {"name": "PET_NPROC_PER_NODE", "value": str(topo.procs_per_node)},
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {
                "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}
            },
        },
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
    ]
    merged: dict[str, dict[str, Any]] = {}
    user: list[EnvVar] = list(queue.spec.env)
    if _allowed(job, queue, Overridable.ENV) and job.spec.overrides is not None:
        user += list(job.spec.overrides.env)
    for var in user:
        merged[var.name] = to_json(var)
    for name, value in parsed.env.items():
        merged[name] = {"name": name, "value": value}
    reserved = {e["name"] for e in ours}
    return ours + [v for name, v in merged.items() if name not in reserved]


def _resources(queue: TorchrunQueue, topo: JobTopology) -> dict[str, Any]:
    nr = queue.spec.node_resources
    amounts: dict[str, str] = {}
    if topo.gpus_per_node:
        amounts[nr.gpu_resource_name] = str(topo.gpus_per_node)
    if nr.cpus is not None:
        amounts["cpu"] = str(nr.cpus)
    if nr.memory is not None:
        amounts["memory"] = str(nr.memory)
    return {"requests": dict(amounts), "limits": dict(amounts)}


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


def placement(job: TorchrunJob, queue: TorchrunQueue) -> dict[str, Any]:
    """nodeSelector, tolerations, affinity and priorityClassName of the job's pods on `queue`."""
    sched = queue.spec.scheduling
    overrides = job.spec.overrides
    node_selector = dict(sched.node_selector)
    tolerations = [to_json(t) for t in sched.tolerations]
    priority = sched.priority_class_name
    if overrides is not None:
        if _allowed(job, queue, Overridable.NODE_SELECTOR):
            node_selector.update(overrides.node_selector)
        if _allowed(job, queue, Overridable.TOLERATIONS):
            tolerations += [to_json(t) for t in overrides.tolerations]
        if _allowed(job, queue, Overridable.PRIORITY_CLASS_NAME) and overrides.priority_class_name:
            priority = overrides.priority_class_name
    if queue.spec.node_resources.gpu_type:
        node_selector.setdefault("nvidia.com/gpu.product", queue.spec.node_resources.gpu_type)
    out: dict[str, Any] = {}
    if node_selector:
        out["nodeSelector"] = node_selector
    if tolerations:
        out["tolerations"] = tolerations
    if sched.affinity:
        out["affinity"] = to_json(sched.affinity)
    if priority:
        out["priorityClassName"] = priority
    return out


def image_of(job: TorchrunJob, queue: TorchrunQueue) -> str:
    o = job.spec.overrides
    if o is not None and o.image and _allowed(job, queue, Overridable.IMAGE):
        return o.image
    return queue.spec.image


def working_dir_of(job: TorchrunJob, queue: TorchrunQueue) -> str:
    o = job.spec.overrides
    if o is not None and o.working_dir and _allowed(job, queue, Overridable.WORKING_DIR):
        return o.working_dir
    return queue.spec.working_dir or job.spec.workspace.mount_path


def build_worker_job(
    job: TorchrunJob,
    queue: TorchrunQueue,
    topo: JobTopology,
    parsed: ParsedCommand,
    *,
    restart: int = 0,
    suspend: bool = False,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
) -> dict[str, Any]:
    spec = queue.spec
    shm = spec.storage.shm_size_per_gpu * topo.gpu_slots_per_node
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image_of(job, queue),
        "workingDir": working_dir_of(job, queue),
        "command": ["torchrun"],
        "args": torchrun_args(
            parsed,
            nnodes=topo.nnodes,
            nproc_per_node=topo.procs_per_node,
            rendezvous=rendezvous(job, cluster_domain),
            max_restarts=job.spec.distributed.max_restarts,
        ),
        "env": _env(job, queue, topo, parsed, cluster_domain),
        "ports": [{"name": "rendezvous", "containerPort": job.spec.distributed.rdzv_port, "protocol": "TCP"}],
        "resources": _resources(queue, topo),
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}],
        "securityContext": to_json(spec.security_context),
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": job.name,
        "containers": [container],
        "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": str(shm)}}],
        **placement(job, queue),
    }
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [to_json(s) for s in spec.image_pull_secrets]
    if spec.service_account_name:
        pod_spec["serviceAccountName"] = spec.service_account_name
    template_meta: dict[str, Any] = {
        "labels": {**spec.pod_labels, **labels(job, "worker"), QUEUE_LABEL: queue.name}
    }
    if spec.pod_annotations:
        template_meta["annotations"] = dict(spec.pod_annotations)
    completions = topo.max_nodes if topo.elastic else topo.nodes
    manifest: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **object_metadata(job, job.name, "worker"),
            "annotations": {RESTART_ANNOTATION: str(restart)},
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": topo.nodes,
            "backoffLimitPerIndex": job.spec.failure_policy.backoff_limit_per_node,
            "maxFailedIndexes": 0,
            "podFailurePolicy": _pod_failure_policy(job),
            "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
            "suspend": suspend,
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }
    apply_scheduler(manifest, job, queue, topo)
    return manifest
