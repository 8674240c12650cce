"""Per-job state that is not in the API (the seed's `jobtracker`: one updater per job).

`JobTracker` maps a job's key to its `JobUpdater`. An updater is created on first sight, dropped
when the job is deleted, and replaced when a job of the same name comes back with a new UID. The
tracker's lock guards the dict. An updater holds facts that outlive a pass — things done once per
job per controller process, and the resourceVersion our last status write replaced — set under
the updater's own lock, held for that alone: never across a pass's network I/O (the workqueue
already never hands one key to two workers; the lock makes the check-and-set safe rather than
lucky). `cache_behind(rv)`: a cached job still at the version our last status write replaced has
not caught up with that write (resourceVersions are never reused, so equality is the whole test).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class JobUpdater:
    key: str
    uid: str
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # e.g. "running_observed" (the submit→running latency is observed once per job),
    # "seed_form_warned" (the seed's deprecated `volumes.workspace` is warned about once)
    _done: set[str] = field(default_factory=set)
    _replaced: str | None = None  # the resourceVersion our last status write replaced

    def once(self, fact: str) -> bool:
        """True the first time `fact` is asked for on this updater, False ever after."""
        with self._lock:
            if fact in self._done:
                return False
            self._done.add(fact)
            return True

    def status_written(self, replaced: str) -> None:
        """Our status write replaced version `replaced` of the job."""
        with self._lock:
            self._replaced = replaced

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
