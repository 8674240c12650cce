"""The API objects the commands read and write, as plain JSON dicts, with user-facing errors.

Each function is one request. A missing job is a `PluginError` naming the job and namespace
(every command that takes NAME needs the job); a missing queue or pod is `None` (the caller
decides what that means). Writes send exactly the fields they change (merge patches), so they
never undo what the controller or another user wrote meanwhile; `patch_job` can carry the
`resourceVersion` read, making the write conditional.
"""

from __future__ import annotations

from typing import Any

from controller.api import JOB_LABEL, ROLE_LABEL
from controller.api.resources import TORCHRUNJOBS, TORCHRUNQUEUES
from controller.meta import Resource
from controller.plugin.errors import PluginError
from controller.plugin.kube import USER_AGENT, Kube
from controller.rest.errors import ApiError
from controller.rest.resources import EVENTS, JOBS, PODS

JSON = dict[str, Any]


def _missing_job(kube: Kube, name: str) -> PluginError:
    return PluginError(
        f'job "{name}" not found in namespace "{kube.namespace}" (kubectl torchrun list shows the jobs)'
    )


def get_job(kube: Kube, name: str) -> JSON:
    try:
        return kube.get(TORCHRUNJOBS, name, kube.namespace)
    except ApiError as exc:
        raise (_missing_job(kube, name) if exc.not_found else exc) from None


def list_jobs(kube: Kube, all_namespaces: bool = False) -> list[JSON]:
    answer = kube.list(TORCHRUNJOBS, None if all_namespaces else kube.namespace)
    return list(answer.get("items") or [])


def create_job(kube: Kube, manifest: JSON) -> JSON:
    try:
        return kube.create(TORCHRUNJOBS, manifest, kube.namespace, field_manager=USER_AGENT)
    except ApiError as exc:
        if exc.status == 409:  # AlreadyExists
            name = manifest["metadata"].get("name")
            raise PluginError(
                f'job "{name}" already exists in namespace "{kube.namespace}": pick another --name, '
                f"or kubectl torchrun delete {name}"
            ) from None
        raise


def patch_job(kube: Kube, name: str, patch: JSON) -> JSON:
    """Merge-patch the job; a conflict (stale `metadata.resourceVersion` in `patch`) is `ApiError`."""
    try:
        return kube.patch(TORCHRUNJOBS, name, patch, kube.namespace, field_manager=USER_AGENT)
    except ApiError as exc:
        raise (_missing_job(kube, name) if exc.not_found else exc) from None


def delete_job(kube: Kube, name: str) -> None:
    """Delete the job; what it owns goes with it (the garbage collector, in the background)."""
    try:
        kube.delete(TORCHRUNJOBS, name, kube.namespace, propagation_policy="Background")
    except ApiError as exc:
        raise (_missing_job(kube, name) if exc.not_found else exc) from None


def _get_or_none(kube: Kube, res: Resource, name: str) -> JSON | None:
    try:
        return kube.get(res, name, kube.namespace)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise


def get_queue(kube: Kube, name: str) -> JSON | None:
    return _get_or_none(kube, TORCHRUNQUEUES, name)


def get_pod(kube: Kube, name: str) -> JSON | None:
    return _get_or_none(kube, PODS, name)


def get_worker_job(kube: Kube, job: str) -> JSON | None:
    """The batch Job named like the job (the controller's worker Job, when it controls it)."""
    return _get_or_none(kube, JOBS, job)


def job_pods(kube: Kube, job: str, role: str | None = None) -> list[JSON]:
    """The job's pods (of one role: `worker`, `sync`), by the job label."""
    selector = f"{JOB_LABEL}={job}" + (f",{ROLE_LABEL}={role}" if role else "")
    answer = kube.list(PODS, kube.namespace, label_selector=selector)
    return list(answer.get("items") or [])


def events_about(kube: Kube, names: set[str]) -> list[JSON]:
    """The namespace's Events whose object is one of `names`, oldest first."""
    answer = kube.list(EVENTS, kube.namespace)
    events = [e for e in answer.get("items") or [] if (e.get("involvedObject") or {}).get("name") in names]
    return sorted(events, key=event_time)


def event_time(event: JSON) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event["metadata"].get("creationTimestamp")
        or ""
    )
