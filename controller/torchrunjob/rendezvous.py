"""Where a job's nodes rendezvous (pure): the `Rendezvous` every node's torchrun is given.

- `c10d` (the default): a TCP store hosted by node 0's torchrun at `<job>-0.<job>:rdzvPort`,
  resolved through the job's headless Service.
- `etcd-v2` with `rdzvEndpoint`: the user's etcd, as given.
- `etcd-v2` without one (or `managedEtcd: true`): the etcd the controller runs for the job,
  reached through its Service `<job>-etcd` on port 2379 (`etcd.py` builds both).
The run id is always the job's UID, so two incarnations of a job name never share state.
"""

from __future__ import annotations

from controller.api import RdzvBackend, TorchrunJob
from controller.torchrunjob.launch import Rendezvous

ETCD_CLIENT_PORT = 2379


def etcd_name(job_name: str) -> str:
    """The name of the managed etcd's pod and Service (at most 57 characters: job names are ≤ 52)."""
    return f"{job_name}-etcd"


def rendezvous(job: TorchrunJob) -> Rendezvous:
    dist = job.spec.distributed
    if dist.rdzv_backend == RdzvBackend.ETCD_V2:
        endpoint = dist.rdzv_endpoint or f"{etcd_name(job.name)}:{ETCD_CLIENT_PORT}"
        return Rendezvous("etcd-v2", endpoint, job.metadata.uid)
    return Rendezvous("c10d", f"{job.name}-0.{job.name}:{dist.rdzv_port}", job.metadata.uid)
