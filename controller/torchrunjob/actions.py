"""Carrying out a decision's actions (`steps.Action`): the deletions it asks for.

Every deletion goes through `Children` (`WorkspaceClaims` and `Generations` delete through it too)
or `ManagedEtcd`, so only objects the job controls are ever deleted, each with a UID
precondition; the TorchrunJob itself (TTL) is deleted with its own UID as precondition, and one
already gone or replaced is not an error.
"""

from __future__ import annotations

import structlog

from controller.api import TorchrunJob
from controller.api.resources import TORCHRUNJOBS
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import JOBS, SERVICES
from controller.torchrunjob.children import Children
from controller.torchrunjob.claims import WorkspaceClaims
from controller.torchrunjob.generations import Generations
from controller.torchrunjob.managed_etcd import ManagedEtcd
from controller.torchrunjob.steps import Action

log = structlog.get_logger("torchrunjob")


class Actions:
    def __init__(
        self,
        client: RESTClient,
        children: Children,
        etcd: ManagedEtcd,
        claims: WorkspaceClaims,
        generations: Generations,
    ) -> None:
        self.client = client
        self.children = children
        self.etcd = etcd
        self.claims = claims
        self.generations = generations

    def carry_out(self, job: TorchrunJob, action: Action) -> None:
        if action is Action.DELETE_WORKERS:
            self.children.delete(JOBS, job)
        elif action is Action.REMOVE_ETCD:
            self.etcd.remove(job)
        elif action is Action.REMOVE_ETCD_SERVICE:
            self.etcd.remove(job, service=True)
        elif action is Action.DELETE_SERVICE:
            self.children.delete(SERVICES, job)
        elif action is Action.STOP_SYNC:
            self.generations.stop_sync(job)
        elif action is Action.CLEAN_WORKSPACE:
            self.generations.clean(job)
            self.claims.clean(job)
        elif action is Action.DELETE_JOB:
            self.delete_job(job)

    def delete_job(self, job: TorchrunJob) -> None:
        try:
            self.client.delete(TORCHRUNJOBS, job.name, job.namespace, uid=job.metadata.uid)
            log.info("deleted after ttlSecondsAfterFinished", key=job.key)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise
