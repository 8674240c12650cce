"""Is an API group/version served? A small cached discovery client (SPEC §5: a queue whose
scheduler's CRDs are missing says so in a condition instead of crashing).

Guarantees: `served(gv)` asks the API server (`GET /apis/<gv>`) at most once per `ttl` seconds
per group/version, from any thread; 404 and 503 (an aggregated API that is not available) mean
"not served" and are cached like an answer; any other error is raised and not cached.
"""

from __future__ import annotations

import threading
import time

from controller.meta import group_version_path
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError


class Discovery:
    def __init__(self, client: RESTClient, ttl: float = 30.0) -> None:
        self.client = client
        self.ttl = ttl
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, bool]] = {}

    def served(self, group_version: str) -> bool:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(group_version)
            if hit is not None and now - hit[0] < self.ttl:
                return hit[1]
        try:
            self.client.request("discovery", "GET", group_version_path(group_version), "discovery")
            ok = True
        except ApiError as exc:
            if exc.status not in (404, 503):
                raise
            ok = False
        with self._lock:
            self._cache[group_version] = (now, ok)
        return ok
