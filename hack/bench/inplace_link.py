"""W2's stand-in for the in-place supervisors of a job's kwok pods, which run no process.

STAND-IN (printed with W2's results): kwok runs no container, so no supervisor writes a state and
no sidecar posts it. Here each Running worker pod of the job gets:
- a token of its service account bound to the pod (TokenRequest, what the kubelet projects into
  the real sidecar) in a file of its own;
- the real sidecar's link — `progress/sidecar/inplace.Watcher` with `reporter.https_poster` — so
  the cadence (at once on a change, every 0.5 s while waiting, every 2 s while running), the body
  and the answer's handling are the product's own;
- an in-memory `Supervisor` in place of `tools/python/torchrun_supervisor.py`: it waits for its
  first word (`waiting`, generation 0), runs the generation a word names (`running`), and when a
  newer generation is named while it runs or after it failed, runs that one at once (the real one
  stops torchrun and starts a fresh one first: seconds the real node measures, not kwok).
The real supervisor and sidecar are proven on the real node (test/e2e/test_realnode.py).

`Links.settled` is W2's acknowledgement: every pod's link has had `running G` accepted by the
endpoint, G is the job's `status.inPlaceGeneration`, and the controller has raised
`status.inPlaceRunningGeneration` to it.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from controller.api.resources import TORCHRUNJOBS
from controller.progress.sidecar.inplace import TICK_SECONDS, State, Watcher
from controller.progress.sidecar.reporter import https_poster
from controller.rest import RESTClient

STAND_IN = (
    "W2's in-place subject: the supervisors are in-memory stand-ins (kwok runs no process); the "
    "sidecar's link is the product's own Watcher and poster, with pod-bound tokens the API server "
    "minted (hack/bench/inplace_link.py); the real ones run on the real node"
)
AUDIENCE = "torchrun-controller"
POSTERS = 16  # threads posting for the pods: 256 sidecars' worth of posts, each a TLS connection


class Supervisor:
    """The stand-in supervisor's state (module doc)."""

    def __init__(self) -> None:
        self.state = State(0, "waiting", None)

    def read(self) -> State:
        return self.state

    def on_word(self, word: dict[str, Any]) -> bool:
        """What the real one does with a word: start the generation it names when it waits for
        one, or when it is newer than the one that runs or failed; a `final` word ends nothing here."""
        generation = int(word["generation"])
        if not word["final"] and (self.state.state == "waiting" or generation > self.state.generation):
            self.state = State(generation, "running", None)
        return True

    def fail(self, code: int) -> None:
        self.state = State(self.state.generation, "failed", code)


class _Link:
    def __init__(self, job: str, url: str, token_file: Path) -> None:
        self.supervisor = Supervisor()
        self.watcher = Watcher(
            job, https_poster(url, str(token_file), None), self.supervisor.read, self.supervisor.on_word
        )


class Links:
    """A stand-in supervisor and the real link for every Running pod of `pods` (a `bigjob.Pods`),
    ticked every 0.1 s in a daemon thread until `stop`; a pod gone or failed loses its link."""

    def __init__(self, rest: RESTClient, ns: str, job: str, url: str, pods: Any, workdir: Path) -> None:
        self._rest, self._ns, self._job, self._url, self._pods = rest, ns, job, url, pods
        self._dir = workdir
        self._dir.mkdir(parents=True, exist_ok=True)
        self._links: dict[str, _Link] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(POSTERS, thread_name_prefix="sidecar")
        threading.Thread(target=self._run, daemon=True).start()

    def _token(self, pod: dict[str, Any]) -> Path:
        meta = pod["metadata"]
        spec = {
            "audiences": [AUDIENCE],
            "expirationSeconds": 3600,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]},
        }
        sa = pod["spec"].get("serviceAccountName") or "default"
        path = f"/api/v1/namespaces/{self._ns}/serviceaccounts/{sa}/token"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        answer = self._rest.request("create", "POST", path, "serviceaccounts/token", body=body)
        out: Path = self._dir / meta["uid"]
        out.write_text(str(answer["status"]["token"]))
        return out

    def _sync(self) -> None:
        running = self._pods.running()
        new = [(uid, pod) for uid, pod in running.items() if uid not in self._links]
        made = list(self._pool.map(lambda up: (up[0], _Link(self._job, self._url, self._token(up[1]))), new))
        with self._lock:
            for uid in [u for u in self._links if u not in running]:
                del self._links[uid]
            self._links.update(made)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
                with self._lock:
                    links = list(self._links.values())
                now = time.monotonic()
                list(self._pool.map(lambda link, at=now: link.watcher.tick(at), links))
            except Exception as exc:  # the control plane goes away at the end of the run
                if not self._stop.is_set():
                    print(f"in-place stand-in: {exc}", flush=True)
            self._stop.wait(TICK_SECONDS)

    def fail(self, uid: str, code: int) -> None:
        """Pod `uid`'s stand-in supervisor says its torchrun exited `code`."""
        with self._lock:
            self._links[uid].supervisor.fail(code)

    def status(self) -> dict[str, Any]:
        return dict(self._rest.get(TORCHRUNJOBS, self._job, self._ns).get("status") or {})

    def acknowledged(self, generation: int, nodes: int) -> bool:
        """`nodes` pods' links have had `running generation` accepted."""
        with self._lock:
            sent = [link.watcher.sent for link in self._links.values()]
        want = State(generation, "running", None)
        return len(sent) == nodes and all(s == want for s in sent)

    def settled(self, nodes: int, generation: int | None = None) -> bool:
        """The module doc's acknowledgement, of `generation` when given (else the status's)."""
        status = self.status()
        current = int(status.get("inPlaceGeneration") or 0)
        if generation is not None and current != generation:
            return False
        return status.get("inPlaceRunningGeneration") == current and self.acknowledged(current, nodes)

    def stop(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
