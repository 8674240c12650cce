"""What the autoscaler reads, and from where: `new_autoscaler` gives it

- nodes (cluster-scoped; cached slim: labels, taints, cordon, allocatable, conditions) and every
  pod of the cluster (cached slim: placement, requests, selector, tolerations, phase) — the load
  is a cluster fact — from a cluster-wide factory of its own that the autoscaler's thread starts
  only when the first elastic job it may resize exists: a controller that runs no elastic job
  never lists, watches or holds the cluster's pods and nodes;
- TorchrunJobs and TorchrunQueues (the informers the controllers share).
The autoscaler writes only `status.desiredNodes` of TorchrunJobs and Events.
"""

from __future__ import annotations

import threading

from controller.api.resources import TORCHRUNJOBS, TORCHRUNQUEUES
from controller.autoscaler.autoscaler import Autoscaler
from controller.autoscaler.metrics import AutoscalerMetrics
from controller.cache import Lister, SharedInformerFactory
from controller.cache.transforms import Shape, project
from controller.metrics.registry import ControllerMetrics
from controller.pods import COMPLETION_INDEX_ANNOTATION
from controller.rest.client import RESTClient
from controller.rest.resources import NODES, PODS
from controller.runtime.events import EventRecorder

_REQUESTS: Shape = {"resources": {"requests": True}}
NODE_SHAPE: Shape = {
    "apiVersion": True,
    "kind": True,
    "metadata": {"name": True, "uid": True, "resourceVersion": True, "labels": True},
    "spec": {"unschedulable": True, "taints": True},
    "status": {"allocatable": True, "capacity": True, "conditions": {"type": True, "status": True}},
}
LOAD_POD_SHAPE: Shape = {
    "apiVersion": True,
    "kind": True,
    "metadata": {
        "name": True,
        "namespace": True,
        "uid": True,
        "resourceVersion": True,
        "labels": True,
        "annotations": {COMPLETION_INDEX_ANNOTATION: True},
        "deletionTimestamp": True,
    },
    "spec": {
        "nodeName": True,
        "nodeSelector": True,
        "tolerations": True,
        "overhead": True,
        "containers": _REQUESTS,
        "initContainers": _REQUESTS,
    },
    "status": {"phase": True},
}
slim_node = project(NODE_SHAPE)
load_pod = project(LOAD_POD_SHAPE)
SYNC_TIMEOUT = 300.0


def new_autoscaler(
    factory: SharedInformerFactory,
    client: RESTClient,
    recorder: EventRecorder,
    *,
    max_load: float,
    period: float,
    metrics: ControllerMetrics,
) -> Autoscaler:
    cluster_wide = SharedInformerFactory(client, metrics=metrics)

    def before_first_pass(stop: threading.Event) -> bool:
        cluster_wide.start(stop)
        return all(cluster_wide.wait_for_cache_sync(SYNC_TIMEOUT).values())

    return Autoscaler(
        client,
        nodes=Lister(cluster_wide.informer_for(NODES, transform=slim_node).indexer),
        pods=Lister(cluster_wide.informer_for(PODS, transform=load_pod).indexer),
        jobs=factory.lister_for(TORCHRUNJOBS),
        queues=factory.lister_for(TORCHRUNQUEUES),
        recorder=recorder,
        max_load=max_load,
        period=period,
        metrics=AutoscalerMetrics(metrics.registry),
        before_first_pass=before_first_pass,
    )
