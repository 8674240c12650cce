"""An elastic job's worker Job runs the size the autoscaler chose (SPEC §6).

The size lives in `status.desiredNodes` (written by the autoscaler, controller/autoscaler/),
held within `elastic.minNodes..maxNodes`; until the autoscaler chooses one it is `numNodes`. The
spec is never touched: `numNodes` stays the immutable initial size. `ElasticSize.ensure`:

- a worker Job about to be created gets that parallelism (completions stay `maxNodes`, as the
  builder sets them: an Indexed Job with parallelism below completions runs the lowest pending
  indexes, so node ranks stay 0..size-1);
- an existing worker Job of the job's current attempt with another parallelism is moved to it.
  **Grow**: parallelism up; the Job controller creates the lowest missing node rank, whose
  torchrun agent joins the rendezvous, and the running agents re-rendezvous with it (torchrun
  counts a membership change as no restart). **Shrink**: the pods of the ranks at and above the
  new size are evicted first, then parallelism is lowered — so the Job controller, which would
  pick its own victims by pod state (possibly rank 0, the rendezvous host) and count them as
  failed indexes, has nothing left to choose; evicted pods carry `DisruptionTarget`, which the
  podFailurePolicy ignores, so nothing counts toward `backoffLimitPerNode` or a whole-job
  restart. The surviving agents see a peer gone, restart their workers (one of
  `distributed.maxRestarts`, which is why the autoscaler resizes only jobs with at least one)
  and re-rendezvous at the smaller size. A finished worker Job is left as it is.
- the topology returned has `nodes` = the current size: the status reports it (`nodes`, `gpus`)
  and the Running condition counts ready workers against it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import structlog

from controller.api import JOB_LABEL, JobTopology, TorchrunJob
from controller.cache import Lister
from controller.meta import is_controlled_by
from controller.rest.client import RESTClient
from controller.rest.resources import JOBS
from controller.torchrunjob import status as st
from controller.torchrunjob.builders import COMPLETION_INDEX_ANNOTATION
from controller.torchrunjob.evictions import evict_live_workers

log = structlog.get_logger("torchrunjob")
Obj = Mapping[str, Any]


def desired_nodes(job: TorchrunJob, topo: JobTopology) -> int:
    """The size the job should run at now: `status.desiredNodes` within the elastic bounds, else
    `numNodes`; a job that is not elastic keeps its size."""
    if not topo.elastic:
        return topo.nodes
    want = job.status.desired_nodes or topo.nodes
    return min(max(want, topo.min_nodes), topo.max_nodes)


def _node_rank(pod: Obj) -> int | None:
    try:
        return int((pod["metadata"].get("annotations") or {})[COMPLETION_INDEX_ANNOTATION])
    except (KeyError, ValueError):
        return None


class ElasticSize:
    def __init__(self, client: RESTClient, pods: Lister) -> None:
        self.client = client
        self.pods = pods

    def ensure(
        self,
        job: TorchrunJob,
        topo: JobTopology,
        manifest: dict[str, Any],
        existing: Obj | None,
        s: st.StatusUpdate,
    ) -> JobTopology:
        """Size the manifest (used if the Job is created) and the existing Job (module doc)."""
        if not topo.elastic:
            return topo
        want = desired_nodes(job, topo)
        manifest["spec"]["parallelism"] = want
        if (
            existing is not None
            and is_controlled_by(existing, job.metadata.uid)
            and st.worker_outcome(existing) is None
        ):
            have = (existing.get("spec") or {}).get("parallelism")
            if have != want:
                evicted = self.evict_from(job, existing, want) if have is not None and want < have else 0
                self.client.patch(JOBS, job.name, {"spec": {"parallelism": want}}, job.namespace)
                log.info("worker Job resized", key=job.key, parallelism=f"{have}->{want}", evicted=evicted)
        sized = dataclasses.replace(topo, nodes=want)
        s.set(nodes=sized.nodes, gpus=sized.total_gpus)
        return sized

    def evict_from(self, job: TorchrunJob, worker_job: Obj, rank: int) -> int:
        """Evict the live pods of `worker_job` of node rank `rank` and above; how many."""
        pods = self.pods.list(job.namespace, {JOB_LABEL: job.name})

        def above(pod: Obj) -> bool:
            index = _node_rank(pod)
            return index is not None and index >= rank

        return evict_live_workers(self.client, pods, worker_job, above)
