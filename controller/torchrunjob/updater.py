"""Per-job state that is not in the API (the seed's `jobtracker`: one updater per job).

`JobTracker` maps a job's key to its `JobUpdater`. An updater is created on first sight, dropped
when the job is deleted, and replaced when a job of the same name comes back with a new UID. The
tracker's lock guards the dict; each updater's own lock guards its fields — and since the
workqueue never hands one key to two workers, an updater is in practice used by one thread at a
time; the locks make that safe rather than lucky.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class JobUpdater:
    key: str
    uid: str
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # the submit→running latency is observed once per job (everything else lives in the status)
    running_observed: bool = False
    # the seed's deprecated `volumes.workspace` is warned about once per controller process
    seed_form_warned: bool = False


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
