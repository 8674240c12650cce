"""Log files for worker pods on kwok nodes, so log-following code can be tested.

Once a worker pod (`torchrun.ai/role=worker`) has started, its containers get a CRI log file: the
lines of annotation `kwok.torchrun.ai/logs` (separated by newlines), or one line naming the pod
and its completion index; and a kwok `Logs` object points `kubectl logs` at it. As with any kwok
pod, `kubectl logs -f` keeps following until the client stops.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from controller.cache import Lister
from controller.rest import RESTClient
from nodeagent.api import COMPLETION_INDEX, FIELD_MANAGER, LOGS, WORKER_LOGS
from nodeagent.crilog import CRILogWriter
from nodeagent.kwokobjects import logs_for
from nodeagent.pods import Obj, on_kwok_node, pod_dir, remove_dirs_of

log = structlog.get_logger("workerlogs")


def log_lines(pod: Obj) -> list[str]:
    meta = pod["metadata"]
    annotations = meta.get("annotations") or {}
    if WORKER_LOGS in annotations:
        return str(annotations[WORKER_LOGS]).split("\n")
    index = annotations.get(COMPLETION_INDEX, "none")
    return [f"testbed: pod {meta['namespace']}/{meta['name']} (completion index {index}) started"]


class WorkerLogs:
    def __init__(self, client: RESTClient, root: Path, pods: Lister, nodes: Lister) -> None:
        self.client = client
        self.root = root
        self.pods = pods
        self.nodes = nodes
        self._served: dict[str, str] = {}  # pod key -> UID of the pod whose logs exist

    def sync(self, key: str) -> None:
        ns, _, name = key.partition("/")
        pod = self.pods.get(name, ns)
        uid = pod["metadata"]["uid"] if pod else None
        if self._served.get(key) != uid:
            self._served.pop(key, None)
            remove_dirs_of(self.root, ns, name, keep_uid=uid)
        if pod is None or key in self._served or not on_kwok_node(pod, self.nodes):
            return
        if (pod.get("status") or {}).get("phase") not in ("Running", "Succeeded", "Failed"):
            return
        files = {}
        for container in pod["spec"]["containers"]:
            writer = CRILogWriter(pod_dir(self.root, pod) / f"{container['name']}.log")
            if writer.path.stat().st_size == 0:
                for line in log_lines(pod):
                    writer.write("stdout", line.encode())
            files[container["name"]] = writer.path
        self.client.apply(LOGS, logs_for(pod, files), field_manager=FIELD_MANAGER)
        self._served[key] = str(uid)
        log.info("worker logs", pod=key, lines=len(log_lines(pod)))
