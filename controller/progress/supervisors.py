"""The leader's memory of the in-place supervisors, and the word each is answered (pure, no I/O).

`SupervisorStates` keeps, per job, the latest state each rank's supervisor told through its sidecar
(`sidecar/inplace.py`: generation, running/failed/..., torchrun's exit code) and when it arrived,
and which pod told it — for the current attempt only (a report from another worker Job replaces the
entry) and at most `MAX_RANKS` ranks. `tell` answers True when the state changed: the endpoint
enqueues the job then (states change a few times per restart, so a 256-node restart is 256 enqueues
that the workqueue folds into one pass). A rank's state told by another pod than before is a
replaced pod (a lost node's, recreated by the worker Job): `replaced` remembers the generation the
old pod was in. Thread-safe: the endpoint's threads write, the reconcilers read.

`word(job, worker_job, attempt_uid, states)` is what the endpoint answers a supervisor: the
generation every pod of the job's current attempt should run (`status.inPlaceGeneration`), `final`
when that pod's attempt is over — the job finished, or the pod's worker Job is not the current
attempt's (a whole-job restart replaced it) — so a failed supervisor ends its pod instead of
waiting; and `final` once every rank told `succeeded` in the current generation, which a
supervisor whose torchrun exited 0 waits for before it ends its pod as done. And `soon` while a
hot reload is on its way (`reload_coming`: a workspace generation was claimed that the current
attempt's pods were neither made for nor asked to run): the sidecar then asks again every
`FAST_SECONDS` instead of every `WATCH_SECONDS`, for a bounded time, so the reload's word reaches
every pod within half a second of the controller's decision instead of two.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controller.api.labels import RESTART_ANNOTATION, annotated_generation
from controller.progress.sidecar.inplace import State

MAX_RANKS = 4096
FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Told:
    """A rank's supervisor state and when it arrived."""

    state: State
    at: datetime
    pod: str = ""  # the UID of the pod that told it


@dataclass
class _Entry:
    attempt: str  # the worker Job's UID
    ranks: dict[int, Told] = field(default_factory=dict)
    replaced: dict[int, int] = field(default_factory=dict)  # rank -> the generation its old pod was in


class SupervisorStates:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def tell(self, key: str, *, attempt: str, rank: int, state: State, now: datetime, pod: str = "") -> bool:
        """Keep rank `rank`'s `state`, told by pod `pod`; True when it changed (module doc). A
        state from another pod than the rank's last one is a replaced pod: `replaced` remembers
        the generation the old pod was in."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.attempt != attempt:
                entry = self._entries[key] = _Entry(attempt)
            previous = entry.ranks.get(rank)
            if previous is None and len(entry.ranks) >= MAX_RANKS:
                return False
            moved = previous is not None and bool(pod) and previous.pod not in ("", pod)
            if moved and previous is not None:
                entry.replaced[rank] = previous.state.generation
            same = previous is not None and previous.state == state and not moved
            entry.ranks[rank] = Told(state, previous.at if same and previous is not None else now, pod)
            return not same

    def replaced(self, key: str, attempt: str) -> dict[int, int]:
        """The ranks of `key`'s worker Job `attempt` whose pod was replaced, and the generation the
        old pod was in."""
        with self._lock:
            entry = self._entries.get(key)
            return dict(entry.replaced) if entry is not None and entry.attempt == attempt else {}

    def view(self, key: str, attempt: str) -> dict[int, Told]:
        """A copy of the states of `key`'s ranks in worker Job `attempt` (empty: none told)."""
        with self._lock:
            entry = self._entries.get(key)
            return dict(entry.ranks) if entry is not None and entry.attempt == attempt else {}

    def forget(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)


def _finished(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") in FINISHED and c.get("status") == "True" for c in status.get("conditions") or ()
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def all_succeeded(states: Mapping[int, Told], generation: int, nodes: int) -> bool:
    """Every node rank 0..nodes-1 told `succeeded` in `generation` (none told: False)."""
    return nodes > 0 and all(
        (told := states.get(rank)) is not None
        and told.state.state == "succeeded"
        and told.state.generation == generation
        for rank in range(nodes)
    )


def word(
    job: Mapping[str, Any],
    worker_job: Mapping[str, Any] | None,
    attempt_uid: str,
    states: Mapping[int, Told] | None = None,
) -> dict[str, Any]:
    """The answer to a supervisor of worker Job `attempt_uid` (module doc); `states`: the attempt's
    (`SupervisorStates.view`), for `final` once every rank succeeded."""
    status = job.get("status") or {}
    attempt = (
        _int(status.get("restarts")) - _int(status.get("inPlaceRestarts")) + _int(status.get("disruptions"))
    )
    current = (
        worker_job is not None
        and worker_job["metadata"].get("uid") == attempt_uid
        and (worker_job["metadata"].get("annotations") or {}).get(RESTART_ANNOTATION, "0") == str(attempt)
    )
    generation = _int(status.get("inPlaceGeneration")) if current else 0
    spec = (worker_job or {}).get("spec") or {}
    nodes = _int(spec.get("parallelism", spec.get("completions")))  # an elastic job's current size
    done = current and all_succeeded(states or {}, generation, nodes)
    final = _finished(status) or not current or done
    return {"generation": generation, "final": final, "soon": not final and reload_coming(job, worker_job)}


def reload_coming(job: Mapping[str, Any], worker_job: Mapping[str, Any] | None) -> bool:
    """A workspace generation was claimed (`spec.workspace.generation`, raised by `kubectl torchrun
    sync`) that neither the worker Job was made for nor a reload in place asked for yet: its sync
    is under way, or its reload about to be asked."""
    wanted = _int((((job.get("spec") or {}).get("workspace")) or {}).get("generation"))
    made_for = annotated_generation(worker_job)
    asked = _int((job.get("status") or {}).get("inPlaceWorkspaceGeneration"))
    return wanted > max(made_for, asked)
