"""Where a job's nodes rendezvous (pure): the `Rendezvous` every node's torchrun is given.

- `c10d` (the default): a TCP store hosted by node 0's torchrun at
  `<job>-0.<job>.<namespace>.svc.<cluster domain>:rdzvPort`, resolved through the job's headless
  Service. The name is the fully qualified one because that is how node 0's torchrun knows the
  store is its own to host: torchrun (every version from 1.10 on, `_matches_machine_hostname`)
  hosts it only when the endpoint is `localhost`, a local IP, the pod's hostname (`<job>-0`) or
  its canonical name, which the kubelet's /etc/hosts makes `<job>-0.<job>.<ns>.svc.<domain>`.
  With the short `<job>-0.<job>` no node hosts the store and every node times out connecting
  (seen on the test bed's real node).
- `etcd-v2` with `rdzvEndpoint`: the user's etcd, as given.
- `etcd-v2` without one (or `managedEtcd: true`): the etcd the controller runs for the job,
  reached through its Service `<job>-etcd` on port 2379 (`etcd.py` builds both).
The run id is always the job's UID, so two incarnations of a job name never share state.
"""

from __future__ import annotations

from controller.api import RdzvBackend, TorchrunJob
from controller.torchrunjob.manifests.launch import Rendezvous

ETCD_CLIENT_PORT = 2379
DEFAULT_CLUSTER_DOMAIN = "cluster.local"


def etcd_name(job_name: str) -> str:
    """The name of the managed etcd's pod and Service (at most 57 characters: job names are ≤ 52)."""
    return f"{job_name}-etcd"


def node0_host(job: TorchrunJob, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> str:
    """The fully qualified name of node 0's pod through the job's headless Service: what node 0's
    torchrun recognizes as itself (its canonical name) and every other node resolves by DNS."""
    return f"{job.name}-0.{job.name}.{job.namespace}.svc.{cluster_domain}"


def rendezvous(job: TorchrunJob, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> Rendezvous:
    dist = job.spec.distributed
    if dist.rdzv_backend == RdzvBackend.ETCD_V2:
        endpoint = dist.rdzv_endpoint or f"{etcd_name(job.name)}:{ETCD_CLIENT_PORT}"
        return Rendezvous("etcd-v2", endpoint, job.metadata.uid)
    return Rendezvous("c10d", f"{node0_host(job, cluster_domain)}:{dist.rdzv_port}", job.metadata.uid)
