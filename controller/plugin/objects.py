"""The API objects the commands read and write, as plain JSON dicts, with user-facing errors.

Each function is one request. A missing job is a `PluginError` naming the job and namespace
(every command that takes NAME needs the job); a missing queue or pod is `None` (the caller
decides what that means). Writes send exactly the fields they change (merge patches), so they
never undo what the controller or another user wrote meanwhile; `patch_job` can carry the
`resourceVersion` read, making the write conditional.
"""

from __future__ import annotations

from typing import Any

from controller.api import API_VERSION, JOB_LABEL, JOB_PLURAL, QUEUE_PLURAL, ROLE_LABEL
from controller.plugin.errors import ApiError, PluginError
from controller.plugin.kube import MERGE_PATCH, Kube

JSON = dict[str, Any]


def jobs_path(namespace: str | None) -> str:
    if namespace is None:
        return f"/apis/{API_VERSION}/{JOB_PLURAL}"
    return f"/apis/{API_VERSION}/namespaces/{namespace}/{JOB_PLURAL}"


def _job_path(kube: Kube, name: str) -> str:
    return f"{jobs_path(kube.namespace)}/{name}"


def _missing_job(kube: Kube, name: str) -> PluginError:
    return PluginError(
        f'job "{name}" not found in namespace "{kube.namespace}" (kubectl torchrun list shows the jobs)'
    )


def get_job(kube: Kube, name: str) -> JSON:
    try:
        job: JSON = kube.request("GET", _job_path(kube, name))
    except ApiError as exc:
        raise (_missing_job(kube, name) if exc.not_found else exc) from None
    return job


def list_jobs(kube: Kube, all_namespaces: bool = False) -> list[JSON]:
    answer = kube.request("GET", jobs_path(None if all_namespaces else kube.namespace))
    return list(answer.get("items") or [])


def create_job(kube: Kube, manifest: JSON, dry_run: bool = False) -> JSON:
    """Create the job (`dry_run`: the server validates and answers without storing)."""
    query = [("dryRun", "All")] if dry_run else []
    try:
        created: JSON = kube.request("POST", jobs_path(kube.namespace), manifest, query)
    except ApiError as exc:
        if exc.conflict:
            name = manifest["metadata"].get("name")
            raise PluginError(
                f'job "{name}" already exists in namespace "{kube.namespace}": pick another --name, '
                f"or kubectl torchrun delete {name}"
            ) from None
        raise
    return created


def patch_job(kube: Kube, name: str, patch: JSON) -> JSON:
    """Merge-patch the job; a conflict (stale `metadata.resourceVersion` in `patch`) is `ApiError`."""
    try:
        job: JSON = kube.request("PATCH", _job_path(kube, name), patch, content_type=MERGE_PATCH)
    except ApiError as exc:
        raise (_missing_job(kube, name) if exc.not_found else exc) from None
    return job


def delete_job(kube: Kube, name: str) -> None:
    """Delete the job; what it owns goes with it (the garbage collector, in the background)."""
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
    try:
        kube.request("DELETE", _job_path(kube, name), body)
    except ApiError as exc:
        raise (_missing_job(kube, name) if exc.not_found else exc) from None


def _get_or_none(kube: Kube, path: str) -> JSON | None:
    try:
        obj: JSON = kube.request("GET", path)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise
    return obj


def get_queue(kube: Kube, name: str) -> JSON | None:
    return _get_or_none(kube, f"/apis/{API_VERSION}/{QUEUE_PLURAL}/{name}")


def get_pod(kube: Kube, name: str) -> JSON | None:
    return _get_or_none(kube, f"/api/v1/namespaces/{kube.namespace}/pods/{name}")


def job_pods(kube: Kube, job: str, role: str | None = None) -> list[JSON]:
    """The job's pods (of one role: `worker`, `sync`), by the job label."""
    selector = f"{JOB_LABEL}={job}" + (f",{ROLE_LABEL}={role}" if role else "")
    answer = kube.request(
        "GET", f"/api/v1/namespaces/{kube.namespace}/pods", query=[("labelSelector", selector)]
    )
    return list(answer.get("items") or [])


def events_about(kube: Kube, names: set[str]) -> list[JSON]:
    """The namespace's Events whose object is one of `names`, oldest first."""
    answer = kube.request("GET", f"/api/v1/namespaces/{kube.namespace}/events")
    events = [e for e in answer.get("items") or [] if (e.get("involvedObject") or {}).get("name") in names]
    return sorted(events, key=event_time)


def event_time(event: JSON) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event["metadata"].get("creationTimestamp")
        or ""
    )
