"""Why an attempt's workers are not all running yet (pure): the one reason `Running=False` gives,
quoting whoever knows it — as `Unschedulable` quotes the scheduler.

Precedence: the earliest stage of a worker's life that holds any worker back wins (nothing after
it can happen before it clears), and within a stage the messages of every worker it holds, each
distinct message once:
1. `WaitingForAdmission` — Kueue holds the worker Job suspended: its Workload's `QuotaReserved` (or
   `Admitted`) condition says why;
2. `PodCreateFailed` — the Job controller cannot create worker pods (its `FailedCreate` Events:
   a ResourceQuota, a LimitRange, a webhook), while the Job has fewer pods than nodes;
3. `Unschedulable` — the scheduler cannot place a worker (its `PodScheduled` message);
4. the kubelet, in the order it prepares a pod: `VolumeMountFailed` (the pod's `FailedMount` /
   `FailedAttachVolume` Events while it is still being created), `ImagePullFailed`,
   `ContainerConfigError` (a container it cannot create: run as root under `runAsNonRoot`, a
   missing ConfigMap or Secret key), `ContainerCrashLooping` (a container, the reporter sidecar
   included, in `CrashLoopBackOff`).
A growth of an elastic job that Kueue holds (a workload slice not admitted, its pod behind Kueue's
elastic-job gate) holds no worker that should run: `held_growth` gives its words when it is all
that is missing, and the job stays Running (`lifecycle.running`).
Pod Security's refusals come before all of these, on another condition: a namespace that refuses
the worker pods gets `Admitted=False PodsForbidden` (`pod_admission.py`) and no worker Job.
Every quoted message is bounded (`MESSAGE_LIMIT` each, `TOTAL_LIMIT` in all): the words come
from pods and Events a tenant can write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.api.kueue import ELASTIC_JOB_GATE
from controller.api.reasons import Reason

MESSAGE_LIMIT = 300
TOTAL_LIMIT = 1024

IMAGE_PULL = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "SignatureValidationFailed",
    }
)
CONFIG = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "PreCreateHookError",
        "PreStartHookError",
        "PostStartHookError",
    }
)
CRASH_LOOP = frozenset({"CrashLoopBackOff"})
MOUNT_EVENTS = frozenset({"FailedMount", "FailedAttachVolume", "FailedMapVolume"})
CREATE_EVENT = "FailedCreate"
# the kubelet's words for an image that runs as root under `runAsNonRoot: true` (kuberuntime)
_ROOT_IMAGE = "will run as root"
ROOT_IMAGE_HINT = (
    " (the queue runs pods as non-root by default: give it spec.securityContext.runAsUser, e.g."
    " 1000, or runAsNonRoot: false if the image must run as root)"
)

# stage order: the earlier wins (module doc)
_ORDER = (
    Reason.WAITING_FOR_ADMISSION,
    Reason.POD_CREATE_FAILED,
    Reason.UNSCHEDULABLE,
    Reason.VOLUME_MOUNT_FAILED,
    Reason.IMAGE_PULL_FAILED,
    Reason.CONTAINER_CONFIG_ERROR,
    Reason.CONTAINER_CRASH_LOOPING,
)


@dataclass(frozen=True)
class Blocked:
    """The `Running=False` reason and message for workers held back (module doc)."""

    reason: Reason
    message: str


def bounded(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` on one line, at most `limit` characters (an ellipsis marks a cut)."""
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _join(said: Mapping[str, str]) -> str:
    """`pod NAME: message` per distinct message, `; `-separated, within `TOTAL_LIMIT`."""
    parts: list[str] = []
    used = 0
    for message, name in said.items():
        part = f"pod {name}: {message}"
        if parts and used + len(part) + 2 > TOTAL_LIMIT:
            parts.append(f"(and {len(said) - len(parts)} more)")
            break
        parts.append(part)
        used += len(part) + 2
    return bounded("; ".join(parts), TOTAL_LIMIT + 40)


def _container_waits(pod: Mapping[str, Any]) -> Iterable[tuple[str, str, str]]:
    """(container, waiting reason, message) of each of the pod's containers that waits."""
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            yield str(cs.get("name") or "?"), str(waiting["reason"]), str(waiting.get("message") or "")


def _stage_of(reason: str) -> Reason | None:
    if reason in IMAGE_PULL:
        return Reason.IMAGE_PULL_FAILED
    if reason in CONFIG:
        return Reason.CONTAINER_CONFIG_ERROR
    if reason in CRASH_LOOP:
        return Reason.CONTAINER_CRASH_LOOPING
    return None


def container_errors(pods: Iterable[Mapping[str, Any]]) -> dict[Reason, dict[str, str]]:
    """Per kubelet stage, the distinct `container C: REASON: message`s of live pods and the first
    pod (by name) that said each."""
    found: dict[Reason, dict[str, str]] = {}
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container, reason, message in _container_waits(pod):
            stage = _stage_of(reason)
            if stage is None:
                continue
            text = f"container {container}: {reason}" + (f": {bounded(message)}" if message else "")
            if _ROOT_IMAGE in message:
                text += ROOT_IMAGE_HINT
            found.setdefault(stage, {}).setdefault(text, str(pod["metadata"]["name"]))
    return found


def creating(pod: Mapping[str, Any]) -> bool:
    """The pod is placed and the kubelet is still preparing it: the only time its mount Events say
    why it does not start (once its containers run or fail, they do not)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or not (pod.get("spec") or {}).get("nodeName"):
        return False
    return any(r in ("ContainerCreating", "PodInitializing") for _, r, _ in _container_waits(pod)) or not (
        status.get("containerStatuses") or status.get("initContainerStatuses")
    )


def mount_failures(pods: Sequence[Mapping[str, Any]], events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The newest mount Event of each pod of `pods` still being created, by involved UID (an Event
    about any other object, or of another reason, is ignored)."""
    names = {str(p["metadata"].get("uid")): str(p["metadata"]["name"]) for p in pods if creating(p)}
    newest: dict[str, tuple[str, str]] = {}
    for event in events:
        uid = str((event.get("involvedObject") or {}).get("uid") or "")
        if uid not in names or event.get("reason") not in MOUNT_EVENTS:
            continue
        when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        if uid not in newest or when >= newest[uid][0]:
            newest[uid] = (when, f"{event.get('reason')}: {bounded(str(event.get('message') or ''))}")
    said: dict[str, str] = {}
    for uid, (_, text) in sorted(newest.items(), key=lambda kv: names[kv[0]]):
        said.setdefault(text, names[uid])
    return said


def create_failure(worker_job: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> str | None:
    """The newest `FailedCreate` Event of this worker Job (by UID), quoted."""
    uid = (worker_job.get("metadata") or {}).get("uid")
    best: tuple[str, str] | None = None
    for event in events:
        if event.get("reason") != CREATE_EVENT or (event.get("involvedObject") or {}).get("uid") != uid:
            continue
        when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        if best is None or when >= best[0]:
            best = (when, bounded(str(event.get("message") or "FailedCreate"), TOTAL_LIMIT))
    return None if best is None else f"job {worker_job['metadata']['name']}: {best[1]}"


def kueue_hold(workloads: Iterable[Mapping[str, Any]]) -> str | None:
    """Why Kueue has not admitted the worker Job: the first Workload's `QuotaReserved=False` (else
    `Admitted=False`) message, or None when none says."""
    for workload in sorted(workloads, key=lambda w: str(w["metadata"]["name"])):
        conditions = (workload.get("status") or {}).get("conditions") or ()
        for kind in ("QuotaReserved", "Admitted"):
            for cond in conditions:
                if cond.get("type") == kind and cond.get("status") == "False" and cond.get("message"):
                    name = workload["metadata"]["name"]
                    return f"Kueue workload {name}: {bounded(str(cond['message']), TOTAL_LIMIT)}"
    return None


@dataclass(frozen=True)
class Evidence:
    """What a pass knows about its workers' start: the pods, and what the I/O side read (None
    where it did not look)."""

    pods: Sequence[Mapping[str, Any]]
    unschedulable: str | None = None  # status.unschedulable's words
    kueue: str | None = None  # kueue_hold's words
    kueue_growth: str | None = None  # the words of a growth's workload slice Kueue holds
    failed_create: str | None = None  # create_failure's words
    mounts: Mapping[str, str] | None = None  # mount_failures' answer


def held_growth(evidence: Evidence, ready: int, nodes: int) -> str | None:
    """Kueue's words for a growth it holds, when that is all that is missing: every worker not
    ready is a pod behind Kueue's elastic-job scheduling gate (the running ranks go on)."""
    if not evidence.kueue_growth:
        return None
    gated = sum(1 for p in evidence.pods if ELASTIC_JOB_GATE in _gates(p))
    return evidence.kueue_growth if gated and ready + gated >= nodes else None


def _gates(pod: Mapping[str, Any]) -> set[str]:
    return {str(g.get("name")) for g in (pod.get("spec") or {}).get("schedulingGates") or ()}


def blocked(evidence: Evidence) -> Blocked | None:
    """The reason of the earliest stage holding a worker back, with its words (module doc)."""
    found: dict[Reason, str] = {}
    if evidence.kueue:
        found[Reason.WAITING_FOR_ADMISSION] = evidence.kueue
    if evidence.failed_create:
        found[Reason.POD_CREATE_FAILED] = evidence.failed_create
    if evidence.unschedulable:
        found[Reason.UNSCHEDULABLE] = evidence.unschedulable
    if evidence.mounts:
        found[Reason.VOLUME_MOUNT_FAILED] = _join(evidence.mounts)
    for stage, said in container_errors(evidence.pods).items():
        found[stage] = _join(said)
    for reason in _ORDER:
        if reason in found:
            return Blocked(reason, found[reason])
    return None
