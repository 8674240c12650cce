"""Admission, as a pure function: may this job run on its queue, and how big is it there?

`admit(job, raw_queue)` returns an `Admission` (the parsed queue, the job's topology on it and its
parsed command) or a `Refusal` whose CamelCase reason and message become `Admitted=False`:
`QueueNotFound`, `QueueNotReady` (quoting the queue's own Ready reason, or why the queue cannot
be read), `InvalidSpec` (every
field `validate_job` finds), `InvalidCommand`. No I/O: the caller
reads the queue from its cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.api import (
    InvalidObjectError,
    JobTopology,
    QueueConditionType,
    TorchrunJob,
    TorchrunQueue,
    find_condition,
    is_true,
    resolve_topology,
    validate_job,
)
from controller.api.reasons import Reason
from controller.torchrunjob.manifests.launch import LaunchError, ParsedCommand, parse_command


@dataclass(frozen=True)
class Admission:
    """What admission resolved: the queue, the job's size on it and its parsed command."""

    queue: TorchrunQueue
    topology: JobTopology
    command: ParsedCommand

    @property
    def message(self) -> str:
        t = self.topology
        size = f"{t.nodes} node(s) × {t.procs_per_node} process(es), {t.total_gpus} GPU(s)"
        return f"queue {self.queue.name}: {size}"


@dataclass(frozen=True)
class Refusal:
    """Why the job may not run yet: the `Admitted=False` reason and message."""

    reason: Reason
    message: str


def admit(
    job: TorchrunJob,
    raw_queue: Mapping[str, Any] | None,
    parse_queue: Callable[[Mapping[str, Any]], TorchrunQueue] = TorchrunQueue.from_json,
) -> Admission | Refusal:
    """The verdict of the module docstring; `parse_queue` may return a shared parse of the same
    queue version (the reconciler's `QueueParses`)."""
    qname = job.spec.job_queue
    if raw_queue is None:
        return Refusal(
            Reason.QUEUE_NOT_FOUND, f"TorchrunQueue {qname} does not exist; the job starts when it is created"
        )
    try:
        queue = parse_queue(raw_queue)
    except InvalidObjectError as exc:  # e.g. written by hand past the CRD's schema: wait for a fix
        return Refusal(Reason.QUEUE_NOT_READY, f"TorchrunQueue {qname} cannot be read: {exc}")
    if not is_true(queue.status.conditions, QueueConditionType.READY):
        ready = find_condition(queue.status.conditions, QueueConditionType.READY)
        why = f": {ready.reason}: {ready.message}" if ready else " yet"
        return Refusal(Reason.QUEUE_NOT_READY, f"TorchrunQueue {qname} is not Ready{why}")
    errors = validate_job(job, queue)
    if errors:
        return Refusal(Reason.INVALID_SPEC, "; ".join(str(e) for e in errors))
    try:
        parsed = parse_command(job.spec.command)
    except LaunchError as exc:
        return Refusal(Reason.INVALID_COMMAND, str(exc))
    return Admission(queue, resolve_topology(job.spec, queue.spec.node_resources), parsed)
