"""What enqueues a TorchrunJob (sample-controller's `NewController`): informers → handlers → keys.

`new_controller` registers, on the factory's shared informers:
- TorchrunJobs: every add, update and delete enqueues the job itself.
- TorchrunQueues: an add or delete, and an update that changes the queue's spec (`generation`)
  or its readiness (`Ready` status or reason), enqueue every job naming that queue. A queue's
  job-count writes change neither, so they fan out to nobody.
- Owned objects (worker Jobs, Services, pods, PVCs, all cached by the `torchrun-job-name` label): each
  event enqueues the TorchrunJob named by the object's *controller owner reference* — directly,
  or for a pod through its worker Job (found in the cache by name, its UID checked, as client-go's
  `resolveControllerRef`) — after `OWNED_EVENT_BATCH` seconds, as kube-controller-manager's Job
  controller batches its pod events: the many events of pods starting together (created,
  scheduled, running, the Job's counts) become one pass, not one each; a resync's replay of an
  owned object (its resourceVersion unchanged) enqueues nothing. A pod the TorchrunJob controls
  itself (a sync pod: a handful of events per generation, nothing to fold) enqueues at once — its
  end publishes a generation, which a hot reload waits for. The label only narrows
  the cache; it never decides whose an object is. One exception, which proves nothing and
  writes nothing: when a labelled object that no TorchrunJob controls goes away, the job its
  label names is looked at again if it is waiting with `NameConflict` — the name may be free now.
- PodGroups (each scheduler's kind, cached by the same label) like the owned objects above, and a
  Kueue Workload's add enqueues the job whose worker Job controls it. Their informers are
  `OptionalInformers`: they start when a job first needs the kind and its API is served, and the
  handlers are attached then.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from controller.api import JOB_LABEL
from controller.api.kueue import WORKLOAD_VERSIONS
from controller.api.reasons import Reason
from controller.api.resources import (
    JOB_QUEUE_INDEX,
    TORCHRUNJOB_KIND,
    TORCHRUNJOBS,
    TORCHRUNQUEUES,
    job_queue_index,
    owning_job,
)
from controller.cache import DeletedFinalStateUnknown, Lister, OptionalInformers, SharedInformerFactory
from controller.cache.informer import FuncHandler, unwrap_tombstone
from controller.cache.store import label_index, label_index_name
from controller.cache.transforms import slim_job, slim_pod
from controller.meta import Obj, Resource, controller_of
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.resources import JOBS, PODS, PVCS, SERVICES
from controller.runtime import Controller
from controller.runtime.events import EventRecorder
from controller.torchrunjob.controller import Options, TorchrunJobReconciler
from controller.torchrunjob.kueue import KueueWorkloads
from controller.torchrunjob.manifests.podgroup import POD_GROUP_RESOURCES
from controller.torchrunjob.podgroups import PodGroups
from controller.workqueue import RateLimitingQueue, default_controller_rate_limiter
from controller.workqueue.metrics import MetricsProvider

NAME = "torchrunjob"


OWNED = (JOBS, SERVICES, PODS, PVCS)

OWNED_EVENT_BATCH = 1.0
"""Seconds an owned object's event waits for more of the same job's (the Job controller's
`syncJobBatchPeriod` is 1 s too): at most one pass per job per batch, at most that much later."""


def owned_listers(factory: SharedInformerFactory) -> dict[Resource, Lister]:
    """The caches of what jobs own, narrowed by our label (pods and worker Jobs slimmed: see
    cache/transforms.py); pods indexed by that label's value, so a pass reads its job's pods
    without scanning the namespace's."""
    by_job = {label_index_name(JOB_LABEL): label_index(JOB_LABEL)}
    factory.informer_for(PODS, label_selector=JOB_LABEL, transform=slim_pod, indexers=by_job)
    factory.informer_for(JOBS, label_selector=JOB_LABEL, transform=slim_job)
    return {res: factory.lister_for(res, label_selector=JOB_LABEL) for res in OWNED}


def new_controller(
    factory: SharedInformerFactory,
    client: RESTClient,
    recorder: EventRecorder,
    *,
    informers: OptionalInformers,
    options: Options,
    threadiness: int,
    metrics: ControllerMetrics,
    metrics_provider: MetricsProvider,
) -> Controller:
    jobs = factory.informer_for(TORCHRUNJOBS, indexers={JOB_QUEUE_INDEX: job_queue_index})
    queues = factory.informer_for(TORCHRUNQUEUES)
    owned = owned_listers(factory)
    reconciler = TorchrunJobReconciler(
        client,
        jobs=Lister(jobs.indexer),
        queues=Lister(queues.indexer),
        worker_jobs=owned[JOBS],
        services=owned[SERVICES],
        pods=owned[PODS],
        claims=owned[PVCS],
        recorder=recorder,
        pod_groups=PodGroups(
            client,
            informers=informers,
            kueue=KueueWorkloads(client, informers=informers, worker_jobs=owned[JOBS]),
        ),
        options=options,
        metrics=metrics,
    )
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        default_controller_rate_limiter(), name=NAME, metrics_provider=metrics_provider
    )
    controller = Controller(NAME, reconciler, queue, threadiness=threadiness, metrics=metrics)
    batched = functools.partial(controller.enqueue_after, seconds=OWNED_EVENT_BATCH)
    handlers = Handlers(controller.enqueue, Lister(jobs.indexer), owned[JOBS], enqueue_batched=batched)
    jobs.add_event_handler(
        FuncHandler(
            add=lambda o, _: handlers.job(o), update=lambda _, n: handlers.job(n), delete=handlers.job
        )
    )
    queues.add_event_handler(
        FuncHandler(
            add=lambda o, _: handlers.queue(o),
            update=handlers.queue_updated,
            delete=handlers.queue,
        )
    )
    owned_handler = FuncHandler(
        add=lambda o, _: handlers.owned(o),
        update=handlers.owned_updated,
        delete=handlers.owned_deleted,
    )
    pod_handler = FuncHandler(
        add=lambda o, _: handlers.owned(o), update=handlers.pod_updated, delete=handlers.owned_deleted
    )
    for resource in OWNED:
        handler = pod_handler if resource == PODS else owned_handler
        factory.informer_for(resource, label_selector=JOB_LABEL).add_event_handler(handler)
    for resource in POD_GROUP_RESOURCES.values():
        informers.add_event_handler(resource, owned_handler, label_selector=JOB_LABEL)
    # a Workload's appearance, and its status (Kueue's words for why it waits: starting.py); on
    # every version, as only the one `kueue.py` reads (the newest served) ever has its informer
    workload_handler = FuncHandler(add=lambda o, _: handlers.owned(o), update=handlers.owned_updated)
    for resource in WORKLOAD_VERSIONS:
        informers.add_event_handler(resource, workload_handler)
    return controller


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _ready(queue: Obj) -> tuple[Any, Any]:
    for cond in (queue.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return cond.get("status"), cond.get("reason")
    return None, None


class Handlers:
    """The event handlers of the module docstring, as small pure-ish methods (they only enqueue)."""

    def __init__(
        self,
        enqueue: Callable[[str], None],
        jobs: Lister,
        worker_jobs: Lister,
        *,
        enqueue_batched: Callable[[str], None] | None = None,
    ) -> None:
        self.enqueue = enqueue
        self.enqueue_batched = enqueue_batched or enqueue  # owned objects' events
        self.jobs = jobs
        self.worker_jobs = worker_jobs

    def job(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        meta = unwrap_tombstone(obj)["metadata"]
        self.enqueue(_key(meta["namespace"], meta["name"]))

    def queue(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        for job in self.jobs.by_index(JOB_QUEUE_INDEX, unwrap_tombstone(obj)["metadata"]["name"]):
            self.job(job)

    def queue_updated(self, old: Obj, new: Obj) -> None:
        if old["metadata"].get("generation") != new["metadata"].get("generation") or _ready(old) != _ready(
            new
        ):
            self.queue(new)

    def owner_key(self, obj: Obj) -> str | None:
        """`namespace/name` of the TorchrunJob controlling `obj` (through its worker Job for pods)."""
        owner = owning_job(obj, lambda ns, name: self.worker_jobs.get(name, ns))
        return None if owner is None else _key(owner.namespace, owner.name)

    def owned(self, obj: Obj) -> None:
        key = self.owner_key(obj)
        if key is not None:
            self.enqueue_batched(key)

    def pod_updated(self, old: Obj, new: Obj) -> None:
        """`owned_updated`, at once for a pod a TorchrunJob controls itself (module doc)."""
        ref = controller_of(new)
        self.owned_updated(old, new, at_once=ref is not None and TORCHRUNJOB_KIND.named_by(ref))

    def owned_updated(self, old: Obj, new: Obj, *, at_once: bool = False) -> None:
        """An update of an owned object; a periodic resync's replay (the same resourceVersion:
        nothing changed) is none — the job's own resync already brings it back, as in
        sample-controller's handlers."""
        if old["metadata"].get("resourceVersion") == new["metadata"].get("resourceVersion"):
            return
        key = self.owner_key(new)
        if key is not None:
            (self.enqueue if at_once else self.enqueue_batched)(key)

    def owned_deleted(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        obj = unwrap_tombstone(obj)
        key = self.owner_key(obj)
        if key is not None:
            self.enqueue_batched(key)
            return
        meta = obj["metadata"]
        named = (meta.get("labels") or {}).get(JOB_LABEL)
        if not named:
            return
        job = self.jobs.get(named, meta.get("namespace"))
        if job is not None and _waits_on_name(job):
            self.enqueue(_key(meta["namespace"], named))


def _waits_on_name(job: Obj) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or ()
    return any(c.get("reason") == Reason.NAME_CONFLICT for c in conditions)
