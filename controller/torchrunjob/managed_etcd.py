"""ManagedEtcd: each etcd-v2 job without an endpoint has its etcd (pod + Service) for the current
attempt, and loses the pod when it finishes.

What `ensure` guarantees, through `Children` (so a same-named object the job does not control is
never adopted, changed or deleted — it is a `wait` with `Admitted=False NameConflict`):
- the Service `<job>-etcd` exists; the pod `<job>-etcd` exists for the job's current whole-job
  restart — a pod of an earlier attempt, or one that ended (evicted, node lost), is deleted first
  and a new one is created once it is gone (its deletion event brings the job back);
- the answer is `Proceed(EtcdState)`: the worker Job is created only once it is Ready (an
  existing worker Job is not held back by an etcd being replaced).
`remove` deletes the pod (and with `service` the Service) when the job no longer needs them.
The builders and the reading of the pod's state are pure, in `manifests/etcd.py`.
"""

from __future__ import annotations

from controller.api import TorchrunJob, TorchrunQueue
from controller.api.reasons import Reason
from controller.meta import is_controlled_by
from controller.rest.resources import PODS, SERVICES
from controller.torchrunjob.children import Children
from controller.torchrunjob.manifests.common import restart_of
from controller.torchrunjob.manifests.etcd import (
    EtcdState,
    build_etcd_pod,
    build_etcd_service,
    etcd_state,
    has_ended,
)
from controller.torchrunjob.manifests.rendezvous import etcd_name
from controller.torchrunjob.steps import Proceed, Step


class ManagedEtcd:
    def __init__(self, children: Children) -> None:
        self.children = children

    def ensure(self, job: TorchrunJob, queue: TorchrunQueue, restart: int) -> Step[EtcdState]:
        name = etcd_name(job.name)
        service = self.children.ensure(SERVICES, job, build_etcd_service(job))
        if not isinstance(service, Proceed):
            return service
        existing = self.children.get(PODS, job, name)
        if existing is not None:
            if existing["metadata"].get("deletionTimestamp"):
                message = f"waiting for the previous etcd pod {name} to go"
                return Proceed(EtcdState(False, Reason.WAITING_FOR_ETCD, message))
            if is_controlled_by(existing, job.metadata.uid) and (
                restart_of(existing) != restart or has_ended(existing)
            ):
                self.children.delete(PODS, job, name)
                message = f"replacing the managed etcd pod {name} (restart {restart}, or the pod ended)"
                return Proceed(EtcdState(False, Reason.WAITING_FOR_ETCD, message))
        pod = self.children.ensure(PODS, job, build_etcd_pod(job, queue, restart=restart))
        if not isinstance(pod, Proceed):
            return pod
        return Proceed(etcd_state(pod.value, queue))

    def remove(self, job: TorchrunJob, *, service: bool = False) -> None:
        name = etcd_name(job.name)
        self.children.delete(PODS, job, name)
        if service:
            self.children.delete(SERVICES, job, name)
