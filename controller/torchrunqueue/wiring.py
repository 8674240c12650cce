"""What enqueues a TorchrunQueue (sample-controller's `NewController`): informers → handlers → keys.

- TorchrunQueues: every add, update and delete enqueues the queue itself.
- TorchrunJobs: an add, a delete, or an update that changes the job's phase re-counts the job's
  queue, `COUNTS_DELAY` seconds later, so a burst of job changes costs one status write.
- Nothing else: StorageClasses and KAI Queues are read from caches (`informers`) but not watched
  for events; a queue that is not Ready looks again every `RECHECK_AFTER` seconds.
"""

from __future__ import annotations

from typing import Any

from controller.api.resources import JOB_QUEUE_INDEX, TORCHRUNJOBS, TORCHRUNQUEUES, job_queue_index
from controller.cache import DeletedFinalStateUnknown, Lister, OptionalInformers, SharedInformerFactory
from controller.cache.informer import FuncHandler, unwrap_tombstone
from controller.meta import Obj
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.discovery import Discovery
from controller.runtime import Controller
from controller.torchrunqueue.controller import TorchrunQueueReconciler
from controller.workqueue import RateLimitingQueue, default_controller_rate_limiter
from controller.workqueue.metrics import MetricsProvider

NAME = "torchrunqueue"
COUNTS_DELAY = 2.0  # seconds; a queue's job counts lag its jobs by at most this


def new_controller(
    factory: SharedInformerFactory,
    client: RESTClient,
    *,
    informers: OptionalInformers,
    discovery: Discovery,
    metrics: ControllerMetrics,
    metrics_provider: MetricsProvider,
) -> Controller:
    queues = factory.informer_for(TORCHRUNQUEUES)
    jobs = factory.informer_for(TORCHRUNJOBS, indexers={JOB_QUEUE_INDEX: job_queue_index})
    reconciler = TorchrunQueueReconciler(
        client,
        queues=Lister(queues.indexer),
        jobs=Lister(jobs.indexer),
        informers=informers,
        discovery=discovery,
    )
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        default_controller_rate_limiter(), name=NAME, metrics_provider=metrics_provider
    )
    controller = Controller(NAME, reconciler, queue, threadiness=1, metrics=metrics)

    def queue_event(obj: Obj | DeletedFinalStateUnknown) -> None:
        controller.enqueue(unwrap_tombstone(obj)["metadata"]["name"])

    def recount(obj: Obj | DeletedFinalStateUnknown) -> None:
        name = (unwrap_tombstone(obj).get("spec") or {}).get("jobQueue")
        if name:
            controller.enqueue_after(name, COUNTS_DELAY)

    def job_updated(old: Obj, new: Obj) -> None:
        if _phase(old) != _phase(new):
            recount(new)

    queues.add_event_handler(
        FuncHandler(add=lambda o, _: queue_event(o), update=lambda _, n: queue_event(n), delete=queue_event)
    )
    jobs.add_event_handler(FuncHandler(add=lambda o, _: recount(o), update=job_updated, delete=recount))
    return controller


def _phase(job: Obj) -> Any:
    return (job.get("status") or {}).get("phase")
