"""Would the job's namespace admit its worker pods? Asked once per attempt, before its worker Job.

A worker Job whose pods the namespace refuses — Pod Security's `enforce` level, a policy engine's
validating webhook (Kyverno, Gatekeeper), a LimitRange — is itself admitted (Pod Security only
warns about a Job's template), and then makes no pod: kube-controller-manager retries and says so
in the Job's Events alone, and the job would sit in `WorkersStarting` for ever. So before the
worker Job of an attempt is created, `PodAdmission.check` sends the pod that Job would make for
index 0 (`worker.worker_pod`) as a server-side dry run (`POST pods?dryRun=All`): every admission
plugin and webhook judges it, nothing is stored, nothing is written. What it guarantees:
- **refused** (403 Forbidden or 422 Invalid): a `Refusal` that the step turns into
  `Admitted=False PodsForbidden`, quoting the API server (for Pod Security the level and
  version, `violates PodSecurity "restricted:latest": ...`, and each container's fault), saying
  which of the queue's fields asked for more (`debug.stackDumps`, `securityContext`) and what to
  do; no worker Job is created. It is asked again after `RECHECK` seconds — a relabelled namespace
  or a removed webhook announces nothing to the controller — and at once when the pod would
  change (an edited queue enqueues its jobs);
- **admitted** (or AlreadyExists: a pod of that name exists, so admission had passed): the
  worker Job is created as before, and the same pod is not asked about again for this job — a
  pass that finds no worker Job in the cache yet (its create on the way) sends nothing;
- **anything else** proves nothing (400: a webhook that does not support dry runs; 404, 405; a
  ResourceQuota's 403 `exceeded quota`, which says *not now*, not *never*: the Job's pods come
  when the quota allows, as any Job's):
  logged, and the Job is created as before; a transient error (429, 5xx, no answer) is raised, so
  the pass is retried with backoff like any other request's failure.
The verdict lives in the job's `JobUpdater` (dropped with the job), keyed by a digest of the pod,
so a new attempt (another restart, workspace generation or queue) asks once more. The request is
counted as `create/dryrun` in `rest_client_requests_total`, never as a write.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import structlog

from controller.api import TorchrunJob, TorchrunQueue
from controller.clock import Clock, RealClock
from controller.rest.client import FIELD_MANAGER, RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import PODS
from controller.torchrunjob.manifests.progress import stack_dumps_allowed
from controller.torchrunjob.manifests.worker import worker_pod
from controller.torchrunjob.updater import JobUpdater

log = structlog.get_logger("torchrunjob")

MEMO = "worker_pod_admission"
QUOTA = "exceeded quota"  # the ResourceQuota admission plugin's words
RECHECK = 60.0
"""Seconds after which a refused pod is asked about again (nothing announces a namespace's new
labels or a policy's change to the controller)."""


@dataclass(frozen=True)
class Refusal:
    """The namespace refuses the worker pods: the `Admitted=False PodsForbidden` message, and
    when (clock seconds) the API server said so."""

    message: str
    at: float


def refusal_message(job: TorchrunJob, queue: TorchrunQueue, pod_name: str, said: str) -> str:
    """What the job says when its namespace refuses its worker pods (`said`: the API server's)."""
    head = (
        f"namespace {job.namespace} refuses the worker pods (a server-side dry run of pod {pod_name}): {said}"
    )
    why = ""
    if stack_dumps_allowed(queue):
        why = (
            f"; TorchrunQueue {queue.name} sets debug.stackDumps: true, so each worker's progress-reporter "
            "sidecar runs as root with SYS_PTRACE, which Pod Security's baseline and restricted levels "
            "refuse: run the job on a queue without debug.stackDumps, or in a namespace whose "
            "pod-security.kubernetes.io/enforce level is privileged"
        )
    elif "PodSecurity" in said:
        why = (
            f"; the worker pods' containers run with TorchrunQueue {queue.name}'s spec.securityContext over "
            "Pod Security restricted's defaults: change the queue, or the namespace's policy"
        )
    return f"{head}{why}. The job starts by itself once the pods are admitted"


def _digest(pod: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(pod, sort_keys=True).encode()).hexdigest()


class PodAdmission:
    def __init__(self, client: RESTClient, clock: Clock | None = None) -> None:
        self.client = client
        self.clock = clock or RealClock()

    def check(
        self, job: TorchrunJob, queue: TorchrunQueue, worker_job: dict[str, Any], updater: JobUpdater
    ) -> Refusal | None:
        """None when the namespace admits the pods `worker_job` would make (or cannot tell), else
        why not (module doc)."""
        pod = worker_pod(worker_job)
        version = _digest(pod)

        def ask() -> Refusal | None:
            return self._ask(job, queue, pod)

        refusal = updater.memo(MEMO, version, ask)
        if refusal is not None and self.clock.now() - refusal.at >= RECHECK:
            updater.forget(MEMO)
            refusal = updater.memo(MEMO, version, ask)
        return refusal

    def retry_in(self, refusal: Refusal) -> float:
        """Seconds until `refusal` is asked about again."""
        return max(RECHECK - (self.clock.now() - refusal.at), 1.0)

    def _ask(self, job: TorchrunJob, queue: TorchrunQueue, pod: dict[str, Any]) -> Refusal | None:
        name = pod["metadata"]["name"]
        try:
            self.client.request(
                "create/dryrun",
                "POST",
                PODS.path(job.namespace),
                PODS.key,
                params={"dryRun": "All", "fieldManager": FIELD_MANAGER},
                body=pod,
            )
        except ApiError as exc:
            if exc.status in (403, 422) and QUOTA not in exc.message:
                said = exc.message or str(exc)
                log.info("worker pods refused", key=job.key, status=exc.status, message=said)
                return Refusal(refusal_message(job, queue, name, said), self.clock.now())
            if exc.transient:
                raise
            if not exc.already_exists:
                log.warning("dry run of a worker pod inconclusive", key=job.key, error=str(exc))
        return None
