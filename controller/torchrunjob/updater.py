"""Per-job state that is not in the API (the seed's `jobtracker`: one updater per job).

`JobTracker` maps a job's key to its `JobUpdater`. An updater is created on first sight, dropped
when the job is deleted, and replaced when a job of the same name comes back with a new UID. The
tracker's lock guards the dict. An updater holds facts that outlive a pass — things done once per
job per controller process, and the resourceVersion our last status write replaced — set under
the updater's own lock, held for that alone: never across a pass's network I/O (the workqueue
already never hands one key to two workers; the lock makes the check-and-set safe rather than
lucky). `cache_behind(rv)`: a cached job still at the version our last status write replaced has
not caught up with that write (resourceVersions are never reused, so equality is the whole test).
`memo(name, version, compute)` keeps one computed value per name for as long as its inputs'
`version` (resourceVersions) stays the same: a pass on an unchanged job and queue parses and
admits nothing again. The values are immutable (frozen dataclasses), so sharing them is safe;
`QueueParses` shares one parse of each queue version among all the jobs admitted to it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from controller.api import TorchrunQueue

T = TypeVar("T")


@dataclass
class JobUpdater:
    key: str
    uid: str
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # e.g. "running_observed" (the submit→running latency is observed once per job),
    # "seed_form_warned" (the seed's deprecated `volumes.workspace` is warned about once)
    _done: set[str] = field(default_factory=set)
    _replaced: str | None = None  # the resourceVersion our last status write replaced
    _memo: dict[str, tuple[Hashable, Any]] = field(default_factory=dict, repr=False)

    def memo(self, name: str, version: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`, or the value it returned for `name` when `version` was the same (an
        exception is not remembered: it is raised again by the next call's compute)."""
        with self._lock:
            held = self._memo.get(name)
        if held is not None and held[0] == version:
            return held[1]  # type: ignore[no-any-return]
        value = compute()
        with self._lock:
            self._memo[name] = (version, value)
        return value

    def forget(self, name: str) -> None:
        """The next `memo(name, ...)` computes again, whatever its version."""
        with self._lock:
            self._memo.pop(name, None)

    def once(self, fact: str) -> bool:
        """True the first time `fact` is asked for on this updater, False ever after."""
        with self._lock:
            if fact in self._done:
                return False
            self._done.add(fact)
            return True

    _counts_held_since: float | None = None  # when a write of new worker counts alone was first held

    def status_written(self, replaced: str) -> None:
        """Our status write replaced version `replaced` of the job (held counts went with it)."""
        with self._lock:
            self._replaced = replaced
            self._counts_held_since = None

    def hold_counts(self, now: float, batch: float) -> float | None:
        """A status write that only changes the worker counts waits up to `batch` seconds from
        when the first such write was held, so the counts of pods starting together are written
        once (with the condition they lead to, when it comes first): the seconds still to wait,
        or None when the write is due now."""
        with self._lock:
            if self._counts_held_since is None:
                self._counts_held_since = now
            waited = now - self._counts_held_since
            if waited >= batch:
                return None
            return batch - waited

    def cache_behind(self, cached: str) -> bool:
        """The cached job (at version `cached`) predates our last status write."""
        with self._lock:
            return self._replaced is not None and cached == self._replaced


class JobTracker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._updaters: dict[str, JobUpdater] = {}

    def get_or_create(self, key: str, uid: str) -> JobUpdater:
        with self._lock:
            updater = self._updaters.get(key)
            if updater is None or updater.uid != uid:
                updater = JobUpdater(key=key, uid=uid)
                self._updaters[key] = updater
            return updater

    def drop(self, key: str) -> None:
        with self._lock:
            self._updaters.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._updaters)


class QueueParses:
    """One parsed `TorchrunQueue` per queue version, shared by every job's admission: a thousand
    jobs on one queue hold one parse of it, not a thousand (and parse it once per change)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parsed: dict[str, tuple[tuple[str, str], TorchrunQueue]] = {}

    def parse(self, raw: Mapping[str, Any]) -> TorchrunQueue:
        meta = raw["metadata"]
        version = (str(meta.get("uid", "")), str(meta.get("resourceVersion", "")))
        with self._lock:
            held = self._parsed.get(meta["name"])
        if held is not None and held[0] == version:
            return held[1]
        queue = TorchrunQueue.from_json(raw)  # an InvalidObjectError is the caller's to report
        with self._lock:
            self._parsed[meta["name"]] = (version, queue)
        return queue
