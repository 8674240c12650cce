"""`python -m nodeagent` (with hack/testbed on PYTHONPATH): run the node agent until SIGTERM.

Started by `hack/controlplane.sh up` as the component `node-agent` (log:
`$RUN_DIR/logs/node-agent.log`). The informers, the rate-limited work queue and the REST client
are the controller's own (`controller.cache`, `controller.workqueue`, `controller.rest`): one
queue of `(kind, key)` items, a few workers, each item handled level-based from the caches.
"""

from __future__ import annotations

import argparse
import signal
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import structlog

from controller.cache import SharedInformerFactory
from controller.cache.informer import DeletedFinalStateUnknown, FuncHandler, unwrap_tombstone
from controller.cache.store import meta_namespace_key
from controller.log import configure
from controller.rest import RESTClient, load_config
from controller.workqueue import ItemExponentialFailureRateLimiter, RateLimitingQueue
from nodeagent.api import NODES, PODS, PVCS, PVS, ROLE_LABEL, STORAGE_CLASSES
from nodeagent.lookup import ApiLookup
from nodeagent.podvolumes import NotReadyError
from nodeagent.provisioner import HostPathProvisioner
from nodeagent.syncpods import SyncPodRunner
from nodeagent.workerlogs import WorkerLogs

log = structlog.get_logger("nodeagent")
Obj = Mapping[str, Any]
Item = tuple[str, str]  # (sync | worker | claim | volume, key)
POD_SELECTOR = f"{ROLE_LABEL} in (sync,worker)"
SHUTDOWN_GRACE = 2.0  # seconds the sync processes get after SIGTERM when the agent stops


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m nodeagent", description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--run-dir", required=True, type=Path, help="the control plane's state directory")
    p.add_argument("--image-path", required=True, help="PATH of the sync processes (python shims first)")
    p.add_argument("--workers", type=int, default=2)
    return p.parse_args(argv)


def _handler(enqueue: Callable[[Item], None], kind: Callable[[Obj], str]) -> FuncHandler:
    """Every add, update and delete enqueues `(kind(obj), key)`."""

    def one(obj: Obj | DeletedFinalStateUnknown, *_: object) -> None:
        o = unwrap_tombstone(obj)
        enqueue((kind(o), meta_namespace_key(o)))

    return FuncHandler(add=one, update=lambda _old, new: one(new), delete=one)


def _pod_kind(pod: Obj) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL))


class NodeAgent:
    """The provisioner, the sync pod runner and the worker logs, fed by one work queue."""

    def __init__(self, client: RESTClient, run_dir: Path, image_path: str) -> None:
        self.run_id = uuid.uuid4().hex[:8]
        self.factory = factory = SharedInformerFactory(client)
        self.queue: RateLimitingQueue[Item] = RateLimitingQueue(ItemExponentialFailureRateLimiter(0.2, 10.0))
        pods, nodes = factory.lister_for(PODS, label_selector=POD_SELECTOR), factory.lister_for(NODES)
        claims, volumes = factory.lister_for(PVCS), factory.lister_for(PVS)
        classes = factory.lister_for(STORAGE_CLASSES)
        pod_root = run_dir / "node-agent" / "pods"
        provisioner = HostPathProvisioner(client, run_dir / "volumes", claims, volumes, classes)
        lookup = ApiLookup(client, claims, volumes)
        self.runner = SyncPodRunner(
            client, pod_root, image_path, lookup, pods, nodes, self._enqueue_sync, self.run_id
        )
        workers = WorkerLogs(client, pod_root, pods, nodes)
        self.handlers: dict[str, Callable[[str], None]] = {
            "sync": self.runner.sync,
            "worker": workers.sync,
            "claim": provisioner.sync_claim,
            "volume": provisioner.sync_volume,
        }
        add = self.queue.add
        factory.informer_for(PODS, label_selector=POD_SELECTOR).add_event_handler(_handler(add, _pod_kind))
        factory.informer_for(PVCS).add_event_handler(_handler(add, lambda _: "claim"))
        factory.informer_for(PVS).add_event_handler(_handler(add, lambda _: "volume"))
        # a class appearing may make pending claims ours
        factory.informer_for(STORAGE_CLASSES).add_event_handler(
            FuncHandler(add=self._all_claims, update=self._all_claims)
        )

    def _enqueue_sync(self, key: str) -> None:
        self.queue.add(("sync", key))

    def _all_claims(self, *_: object) -> None:
        for claim in self.factory.informer_for(PVCS).list():
            self.queue.add(("claim", meta_namespace_key(claim)))

    def run(self, stop: threading.Event, workers: int) -> None:
        self.factory.start(stop)
        synced = self.factory.wait_for_cache_sync(60)
        log.info("caches synced", synced=synced, run_id=self.run_id)
        for i in range(workers):
            threading.Thread(target=self._work, name=f"worker-{i}", daemon=True).start()
        stop.wait()
        log.info("stopping")
        self.queue.shut_down()
        self.runner.shutdown(SHUTDOWN_GRACE)
        self.factory.shutdown()

    def _work(self) -> None:
        while True:
            item, shutdown = self.queue.get()
            if shutdown or item is None:
                return
            try:
                if item[0] in self.handlers:
                    self.handlers[item[0]](item[1])
                self.queue.forget(item)
            except NotReadyError as exc:
                log.info("not ready, retrying", item=item, why=str(exc))
                self.queue.add_rate_limited(item)
            except Exception:
                log.exception("failed, retrying", item=item)
                self.queue.add_rate_limited(item)
            finally:
                self.queue.done(item)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    configure("info", "console")
    client = RESTClient(load_config(args.kubeconfig), qps=100, burst=200, user_agent="testbed-node-agent")
    agent = NodeAgent(client, args.run_dir, args.image_path)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("node agent starting", run_dir=str(args.run_dir), image_path=args.image_path)
    agent.run(stop, args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
