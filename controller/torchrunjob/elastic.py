"""An elastic job's worker Job runs the size the autoscaler chose (SPEC §6).

The size lives in `status.desiredNodes` (written by the autoscaler, controller/autoscaler/),
held within `elastic.minNodes..maxNodes`; until the autoscaler chooses one it is `numNodes`. The
spec is never touched: `numNodes` stays the immutable initial size.

- `desired_nodes` (pure): that size. A worker Job about to be created is built with it as its
  parallelism (`manifests/worker.py`; completions stay `maxNodes`: an Indexed Job with
  parallelism below completions runs the lowest pending indexes, so node ranks stay 0..size-1).
- `ElasticSize.resize`: an existing worker Job of the job's current attempt with another
  parallelism is moved to it.
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
- the topology the reconciler uses from then on has `nodes` = the current size: the status
  reports it (`nodes`, `gpus`) and the Running condition counts ready workers against it.
"""

from __future__ import annotations

import structlog

from controller.api import JOB_LABEL, JobTopology, TorchrunJob
from controller.cache import Lister
from controller.meta import Obj, is_controlled_by
from controller.pods import node_rank
from controller.rest.client import RESTClient
from controller.rest.resources import JOBS
from controller.torchrunjob.evictions import evict_live_workers
from controller.torchrunjob.status import worker_outcome

log = structlog.get_logger("torchrunjob")


def desired_nodes(job: TorchrunJob, topo: JobTopology) -> int:
    """The size the job should run at now: `status.desiredNodes` within the elastic bounds, else
    `numNodes`; a job that is not elastic keeps its size."""
    if not topo.elastic:
        return topo.nodes
    want = job.status.desired_nodes or topo.nodes
    return min(max(want, topo.min_nodes), topo.max_nodes)


class ElasticSize:
    def __init__(self, client: RESTClient, pods: Lister) -> None:
        self.client = client
        self.pods = pods

    def resize(self, job: TorchrunJob, existing: Obj, want: int) -> None:
        """Move the job's live worker Job to parallelism `want` (evicting the ranks a shrink drops
        first); a Job of another owner or that has finished is left as it is."""
        if not is_controlled_by(existing, job.metadata.uid) or worker_outcome(existing) is not None:
            return
        have = (existing.get("spec") or {}).get("parallelism")
        if have == want:
            return
        evicted = self.evict_from(job, existing, want) if have is not None and want < have else 0
        self.client.patch(JOBS, job.name, {"spec": {"parallelism": want}}, job.namespace)
        log.info("worker Job resized", key=job.key, parallelism=f"{have}->{want}", evicted=evicted)

    def evict_from(self, job: TorchrunJob, worker_job: Obj, rank: int) -> int:
        """Evict the live pods of `worker_job` of node rank `rank` and above; how many."""
        pods = self.pods.list(job.namespace, {JOB_LABEL: job.name})

        def above(pod: Obj) -> bool:
            index = node_rank(pod)
            return index is not None and index >= rank

        return evict_live_workers(self.client, pods, worker_job, above)
