"""What `list` and `status` print, as pure functions of the API objects (dicts in, text out).

Columns are aligned like kubectl's (two spaces between columns, no borders) so the output reads
the same as `kubectl get` and stays greppable; times are ages (`45s`, `12m`, `3h`, `2d`) relative
to `now`, passed in so tests need no clock.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from controller.api import JobPhase
from controller.api.labels import ROLE_LABEL
from controller.plugin.logs import rank_of
from controller.plugin.objects import JSON, event_time
from controller.plugin.progressbar import progress_line
from controller.plugin.watch import held_up, phase

LIST_COLUMNS = ("NAME", "QUEUE", "NODES", "GPUS", "PHASE", "RESTARTS", "PROGRESS", "GOODPUT", "AGE")
EVENTS_SHOWN = 10


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces; trailing spaces stripped."""
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def age(timestamp: str | None, now: datetime.datetime) -> str:
    """kubectl-style age of an RFC 3339 timestamp: 45s, 12m, 3h, 2d; `<unknown>` without one."""
    if not timestamp:
        return "<unknown>"
    then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _size(job: JSON) -> tuple[str, str]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    nodes = status.get("nodes") or spec.get("numNodes") or "-"
    gpus = status.get("gpus") or spec.get("numGPUs") or "-"
    return str(nodes), str(gpus)


def job_rows(jobs: Sequence[JSON], now: datetime.datetime, with_namespace: bool = False) -> str:
    """The `list` table (NAMESPACE first when listing every namespace); GOODPUT is
    `status.goodput.summary`, as `kubectl get tj` shows it ("-" before a training step)."""
    rows = []
    for job in sorted(jobs, key=lambda j: (j["metadata"].get("namespace", ""), j["metadata"]["name"])):
        meta, status = job["metadata"], job.get("status") or {}
        nodes, gpus = _size(job)
        row = [meta["name"], job["spec"].get("jobQueue", ""), nodes, gpus, phase(job)]
        progress = (status.get("progress") or {}).get("summary") or "-"
        goodput = (status.get("goodput") or {}).get("summary") or "-"
        row += [status.get("restarts", 0), progress, goodput, age(meta.get("creationTimestamp"), now)]
        rows.append(([meta.get("namespace", "")] if with_namespace else []) + row)
    return table((("NAMESPACE",) if with_namespace else ()) + LIST_COLUMNS, rows)


def pod_state(pod: JSON) -> str:
    """The worker container's state as kubectl shows it: Running, a waiting reason
    (ContainerCreating), a terminated reason with its exit code, else the pod phase."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "running" in state:
            return "Running"
        if "waiting" in state:
            return str(state["waiting"].get("reason") or "Waiting")
        if "terminated" in state:
            term = state["terminated"]
            return f"{term.get('reason') or 'Terminated'} (exit {term.get('exitCode')})"
    return str(status.get("phase") or "Unknown")


def _restarts(pod: JSON) -> int:
    return sum(
        int(cs.get("restartCount") or 0) for cs in (pod.get("status") or {}).get("containerStatuses") or []
    )


def _workspace_line(job: JSON) -> str:
    ws = (job.get("spec") or {}).get("workspace") or {}
    status = job.get("status") or {}
    sha = status.get("workspaceSha256")
    running = f"running generation {status.get('workspaceGeneration', 0)}" + (
        f" (sha256 {sha[:12]})" if sha else ""
    )
    return f"source {ws.get('source', 'upload')}, wanted generation {ws.get('generation', 0)}, {running}"


def _checkpoint_lines(job: JSON, now: datetime.datetime) -> list[str]:
    """`status.checkpoint` in a line: the newest complete checkpoint now (saved while the job runs,
    with its age) — else the newest the attempt's start found — and what this attempt resumed
    from (nothing before the workers' first start reported; docs/checkpoints.md)."""
    cp = (job.get("status") or {}).get("checkpoint")
    if not cp:
        return []
    latest = "none complete"
    if newest := cp.get("newest"):
        step = f"step {newest['step']}, " if newest.get("step") is not None else ""
        latest = f"newest {newest.get('name')} ({step}saved {age(newest.get('time'), now)} ago)"
    elif cp.get("latest"):
        step = f"step {cp['step']}, " if cp.get("step") is not None else ""
        latest = f"latest {cp['latest']} ({step}{cp.get('time', '?')}, {cp.get('count', 0)} complete)"
    resumed = cp.get("resumedFrom")
    attempt = f"attempt {cp.get('attempt', 0)} " + (
        f"resumed from {resumed}" if resumed else "started from scratch"
    )
    return [f"Checkpoint: {latest}; {attempt}"]


GOODPUT_CAUSES = ("scheduling", "startup", "restarts", "redone", "stalls")


def goodput_line(job: JSON) -> str | None:
    """`status.goodput` in a line: the good share of the wall time counted, then each cause's
    (`83% (scheduling 5%, startup 4%, restarts 3%, redone 2%, stalls 3%)`); None before a
    training step was seen (no `summary`)."""
    ledger = (job.get("status") or {}).get("goodput") or {}
    seconds = ledger.get("seconds") or {}
    total = sum(float(seconds.get(k) or 0) for k in ("good", *GOODPUT_CAUSES))
    if not ledger.get("summary") or total <= 0:
        return None
    causes = ", ".join(f"{k} {round(100 * float(seconds.get(k) or 0) / total)}%" for k in GOODPUT_CAUSES)
    return f"{round(100 * float(seconds.get('good') or 0) / total)}% ({causes})"


def waiting_line(job: JSON) -> str | None:
    """What a job that has not started yet waits for (`held_up`: the condition that is not True,
    its reason and words — the scheduler's, the kubelet's, Kueue's, the namespace's), else None."""
    if phase(job) not in (JobPhase.PENDING.value, JobPhase.SYNCING.value):
        return None
    return held_up(job)


def _restarts_said(job: JSON) -> str:
    """`restarts N`, how many of them ran in place when any did, and the uncounted new attempts
    after a disrupted rank when there were any."""
    status = job.get("status") or {}
    said = f"restarts {status.get('restarts', 0)}"
    in_place = status.get("inPlaceRestarts") or 0
    said = f"{said}, {in_place} in place" if in_place else said
    disruptions = status.get("disruptions") or 0
    return f"{said}; {disruptions} disrupted, started again uncounted" if disruptions else said


def status_text(job: JSON, pods: Sequence[JSON], events: Sequence[JSON], now: datetime.datetime) -> str:
    """The `status` page: phase, workspace generation, checkpoints, progress, goodput, conditions,
    pods per node, recent Events."""
    meta, spec = job["metadata"], job.get("spec") or {}
    nodes, gpus = _size(job)
    lines = [
        f"Name:       {meta['name']}",
        f"Namespace:  {meta.get('namespace', '')}",
        f"Queue:      {spec.get('jobQueue', '')}",
        f"Command:    {spec.get('command', '')}",
        f"Size:       {nodes} nodes, {gpus} GPUs",
        f"Phase:      {phase(job)}    ({_restarts_said(job)})",
        *([f"Waiting:    {line}"] if (line := waiting_line(job)) else []),
        f"Workspace:  {_workspace_line(job)}",
        *_checkpoint_lines(job, now),
        *([f"Progress:   {line}"] if (line := progress_line(job, now)) else []),
        *([f"Goodput:    {line}"] if (line := goodput_line(job)) else []),
        "",
        "Conditions:",
    ]
    conds = (job.get("status") or {}).get("conditions") or []
    crow = [(c.get("type"), c.get("status"), c.get("reason", ""), c.get("message", "")) for c in conds]
    lines += _indent(table(("TYPE", "STATUS", "REASON", "MESSAGE"), crow)) if crow else ["  (none yet)"]
    lines += ["", "Pods:"]
    prow = [
        (p["metadata"]["name"], (p["metadata"].get("labels") or {}).get(ROLE_LABEL, ""), _rank(p),
         (p.get("spec") or {}).get("nodeName") or "<none>", pod_state(p), _restarts(p))
        for p in sorted(pods, key=lambda p: p["metadata"]["name"])
    ]  # fmt: skip
    lines += (
        _indent(table(("NAME", "ROLE", "RANK", "NODE", "STATE", "RESTARTS"), prow)) if prow else ["  (none)"]
    )
    lines += ["", f"Events (last {EVENTS_SHOWN}):"]
    erow = [
        (age(event_time(e), now), e.get("type", ""), e.get("reason", ""),
         (e.get("involvedObject") or {}).get("name", ""), e.get("message", ""))
        for e in list(events)[-EVENTS_SHOWN:]
    ]  # fmt: skip
    lines += _indent(table(("AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"), erow)) if erow else ["  (none)"]
    return "\n".join(lines)


def _rank(pod: JSON) -> str:
    rank = rank_of(pod)
    return "-" if rank is None else str(rank)


def _indent(text: str) -> list[str]:
    return ["  " + line for line in text.splitlines()]
