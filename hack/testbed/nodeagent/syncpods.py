"""Sync pods on kwok nodes run for real: the kubelet's part, played with a local process.

For each pod labelled `torchrun.ai/role=sync` scheduled to a kwok node, level-based on every
event (`sync(key)`):

1. **prepare** (once per pod UID): its volumes as host directories (`podvolumes.py`), its
   container's environment and command line mapped to them (`podenv.py`), an empty CRI log file,
   a kwok `Exec` (same environment, the working directory mapped) and `Logs` named after the pod,
   then the annotation `testbed.torchrun.ai/prepared` — kwok's pod-start stage waits for it, so
   the pod is never Running before `kubectl exec` and `kubectl logs` can reach it.
2. **start**, once kwok reports it Running: the first container's command as a process
   (`process.py`), its output in the log file, `TORCHRUN_TERMINATION_LOG` (and the container's
   terminationMessagePath) pointing at a host file.
3. **report** its end in the pod's status as a kubelet does: phase Succeeded or Failed, the
   container terminated (exit code, reason Completed or Error, the termination message), not
   ready. kwok's stages never touch a sync pod again after it started (no
   `kwok.torchrun.ai/outcome` annotation).

A pod being deleted has its process group stopped (SIGTERM, SIGKILL after its grace period,
capped), and its files go once the pod is gone. A Running pod whose process was started by an
earlier agent run (annotation `testbed.torchrun.ai/started-by`) lost it: it is reported Failed
with reason ContainerStatusUnknown, as a kubelet reports a container it cannot find.
Only the first container runs; others are reported Completed without running. The pod's
restartPolicy is not honoured (sync pods use Never).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from controller.cache import Lister
from controller.rest import ApiError, RESTClient
from nodeagent.api import EXECS, FIELD_MANAGER, LOGS, PODS, PREPARED, STARTED_BY
from nodeagent.crilog import CRILogWriter, timestamp
from nodeagent.kwokobjects import exec_for, logs_for
from nodeagent.podenv import container_env, host_argv, host_env
from nodeagent.pods import Obj, on_kwok_node, pod_dir, remove_dirs_of
from nodeagent.podvolumes import Lookup, PathMap, volume_dirs
from nodeagent.process import ContainerProcess, Termination

log = structlog.get_logger("syncpods")
MAX_GRACE = 10.0  # seconds: a deleted pod's process gets at most this long after SIGTERM


@dataclass
class SyncContainer:
    """One sync pod's container as this agent runs it."""

    uid: str
    process: ContainerProcess
    started: bool = False  # its process was started, or found lost
    termination: Termination | None = None
    reported: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class SyncPodRunner:
    def __init__(
        self,
        client: RESTClient,
        root: Path,
        image_path: str,
        lookup: Lookup,
        pods: Lister,
        nodes: Lister,
        enqueue: Callable[[str], None],
        run_id: str,
    ) -> None:
        self.client = client
        self.root = root
        self.image_path = image_path  # PATH inside the "image": the python shims first
        self.lookup = lookup
        self.pods = pods
        self.nodes = nodes
        self.enqueue = enqueue
        self.run_id = run_id
        self._containers: dict[str, SyncContainer] = {}  # by pod key
        self._lock = threading.Lock()

    # -- the level-based step ------------------------------------------------------------------

    def sync(self, key: str) -> None:
        ns, _, name = key.partition("/")
        pod = self.pods.get(name, ns)
        uid = pod["metadata"]["uid"] if pod else None
        with self._lock:
            current = self._containers.get(key)
            stale = current is not None and current.uid != uid
            if stale:
                del self._containers[key]
        if stale and current is not None:
            current.process.stop(0)  # its pod is gone: nothing left to be graceful for
            current = None
        if pod is None:
            remove_dirs_of(self.root, ns, name)
            return
        if pod["metadata"].get("deletionTimestamp"):
            if current is not None:
                grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
                current.process.stop(min(float(grace), MAX_GRACE))
            return
        phase = (pod.get("status") or {}).get("phase")
        if not on_kwok_node(pod, self.nodes) or (phase in ("Succeeded", "Failed") and current is None):
            return
        container = current or self._prepare(key, pod)
        if phase == "Running":
            self._run(key, pod, container)

    def _prepare(self, key: str, pod: Obj) -> SyncContainer:
        remove_dirs_of(
            self.root, pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        )
        home = pod_dir(self.root, pod)
        spec = pod["spec"]["containers"][0]
        volumes = volume_dirs(pod, home, self.lookup)
        paths = PathMap.for_container(spec, volumes, home / "termination-log")
        env = container_env(pod, spec, self.lookup)
        argv = host_argv(spec, env, paths)
        process_env = {
            "PATH": self.image_path,
            "HOME": str(home),
            "HOSTNAME": pod["metadata"]["name"],
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",  # as the controller's image sets it (Dockerfile)
            **host_env(env, paths),
            "TORCHRUN_TERMINATION_LOG": str(home / "termination-log"),
        }
        work_dir = paths.host(spec["workingDir"]) if spec.get("workingDir") else None
        work_dir = work_dir or home
        work_dir.mkdir(parents=True, exist_ok=True)
        writer = CRILogWriter(home / f"{spec['name']}.log")
        self.client.apply(
            EXECS, exec_for(pod, spec["name"], work_dir, process_env), field_manager=FIELD_MANAGER
        )
        self.client.apply(LOGS, logs_for(pod, {spec["name"]: writer.path}), field_manager=FIELD_MANAGER)
        process = ContainerProcess(
            argv,
            process_env,
            work_dir,
            writer,
            home / "termination-log",
            fallback_to_logs=spec.get("terminationMessagePolicy") == "FallbackToLogsOnError",
        )
        container = SyncContainer(pod["metadata"]["uid"], process)
        with self._lock:
            self._containers[key] = container
        if (pod["metadata"].get("annotations") or {}).get(PREPARED) != "true":
            self._annotate(pod, PREPARED, "true")
        log.info("prepared", pod=key, argv=argv, work_dir=str(work_dir))
        return container

    def _run(self, key: str, pod: Obj, container: SyncContainer) -> None:
        with container.lock:
            if not container.started:
                started_by = (pod["metadata"].get("annotations") or {}).get(STARTED_BY)
                if started_by and started_by != self.run_id:
                    now = timestamp()
                    message = "the test bed's node agent restarted: this container's process was lost"
                    container.termination = Termination(137, "ContainerStatusUnknown", message, now, now)
                else:
                    self._annotate(pod, STARTED_BY, self.run_id)
                    container.process.start(lambda t: self._exited(key, container, t))
                    log.info("started", pod=key, pid=container.process.pid)
                container.started = True
            if container.termination is None or container.reported:
                return
            self._report(pod, container.termination)
            container.reported = True
            log.info("reported", pod=key, exit_code=container.termination.exit_code)

    def _exited(self, key: str, container: SyncContainer, termination: Termination) -> None:
        container.termination = termination
        self.enqueue(key)

    # -- writes --------------------------------------------------------------------------------

    def _annotate(self, pod: Obj, name: str, value: str) -> None:
        meta = pod["metadata"]
        patch = {"metadata": {"uid": meta["uid"], "annotations": {name: value}}}
        self.client.patch(PODS, meta["name"], patch, meta["namespace"], field_manager=FIELD_MANAGER)

    def _report(self, pod: Obj, term: Termination) -> None:
        meta = pod["metadata"]
        try:
            self.client.patch(
                PODS,
                meta["name"],
                terminated_status(pod, term),
                meta["namespace"],
                patch_type="strategic",
                subresource="status",
                field_manager=FIELD_MANAGER,
            )
        except ApiError as exc:
            if not exc.not_found:
                raise

    def shutdown(self, grace: float) -> None:
        """Stop every process (SIGTERM, SIGKILL after `grace`) and wait for them."""
        with self._lock:
            processes = [c.process for c in self._containers.values()]
        for p in processes:
            p.stop(grace)
        for p in processes:
            p.wait(grace + 1.0)


def terminated_status(pod: Obj, term: Termination) -> dict[str, Any]:
    """The status patch of a pod whose first container ended with `term` (pure)."""
    failed = term.exit_code != 0
    statuses = []
    for i, c in enumerate(pod["spec"]["containers"]):
        t = term if i == 0 else Termination(0, "Completed", "", term.started_at, term.finished_at)
        terminated = {
            "exitCode": t.exit_code,
            "reason": t.reason,
            "startedAt": t.started_at,
            "finishedAt": t.finished_at,
        }
        if t.message:
            terminated["message"] = t.message
        statuses.append(
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        )
    reason = "PodFailed" if failed else "PodCompleted"
    now = term.finished_at
    return {
        "metadata": {"uid": pod["metadata"]["uid"]},
        "status": {
            "phase": "Failed" if failed else "Succeeded",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": reason, "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "False", "reason": reason, "lastTransitionTime": now},
            ],
            "containerStatuses": statuses,
        },
    }
