"""How a job's processes find each other and how far it may stretch: `distributed`, `elastic`.

torchrun's rendezvous is `c10d` by default (a TCP store on node 0, at `<job>-0.<job>:rdzvPort`);
`etcd-v2` needs an etcd serving the v2 API: the user's (`rdzvEndpoint`), or — without an endpoint,
as the seed's examples write it — one the controller runs for the job (an etcd 3.5 pod
`<job>-etcd`, see `torchrunjob/manifests/rendezvous.py`). `managedEtcd: true` is the explicit spelling of
the same. CEL rejects an endpoint together with `managedEtcd`, and either with `c10d`.
`distributed.maxRestarts` is torchrun's in-node restart count, not whole-job restarts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from controller.api.fields import Rule, api, cel

MAX_NODES = 1024
# etcd 3.5 is the last etcd serving the v2 API that torchrun's etcd-v2 rendezvous speaks; the tag
# equals ETCD_V2_VERSION in hack/versions.env, the etcd the tests run (a unit test keeps them equal)
DEFAULT_ETCD_IMAGE = "gcr.io/etcd-development/etcd:v3.5.35"


class Backend(str, enum.Enum):
    NCCL = "nccl"
    GLOO = "gloo"


class RdzvBackend(str, enum.Enum):
    C10D = "c10d"
    ETCD_V2 = "etcd-v2"


_RDZV_RULES = (
    Rule(
        "!has(self.rdzvEndpoint) || !self.managedEtcd",
        "rdzvEndpoint and managedEtcd are mutually exclusive",
        field_path=".managedEtcd",
        reason="FieldValueForbidden",
    ),
    Rule(
        "self.rdzvBackend == 'etcd-v2' || (!has(self.rdzvEndpoint) && !self.managedEtcd)",
        "rdzvEndpoint and managedEtcd are only for rdzvBackend etcd-v2; c10d rendezvous runs on node 0",
        field_path=".rdzvBackend",
        reason="FieldValueForbidden",
    ),
)


@cel(*_RDZV_RULES)
@dataclass(frozen=True)
class Distributed:
    """torch.distributed settings of the launch."""

    backend: Backend = field(
        default=Backend.NCCL, metadata=api("Process group backend: nccl (GPUs) or gloo (CPUs).")
    )
    rdzv_backend: RdzvBackend = field(
        default=RdzvBackend.C10D, metadata=api("Rendezvous: c10d (a store on node 0) or etcd-v2.")
    )
    rdzv_endpoint: str | None = field(
        default=None,
        metadata=api(
            "host:port of your etcd (serving the v2 API) for etcd-v2 rendezvous; without it the "
            "controller runs an etcd for the job.",
            schema={"maxLength": 261, "pattern": r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?:[0-9]{1,5}$"},
        ),
    )
    managed_etcd: bool = field(
        default=False,
        metadata=api(
            "etcd-v2 rendezvous on an etcd the controller runs for the job (what etcd-v2 without "
            "rdzvEndpoint means anyway)."
        ),
    )
    rdzv_port: int = field(
        default=29400,
        metadata=api("Port of the c10d rendezvous on node 0.", schema={"minimum": 1, "maximum": 65535}),
    )
    max_restarts: int = field(
        default=0,
        metadata=api(
            "torchrun --max_restarts: restarts of the worker processes inside a node.",
            schema={"minimum": 0, "maximum": 100, "format": "int32"},
        ),
    )

    @property
    def runs_managed_etcd(self) -> bool:
        """etcd-v2 rendezvous without an endpoint: the controller runs the etcd."""
        return self.rdzv_backend is RdzvBackend.ETCD_V2 and self.rdzv_endpoint is None


@cel(
    Rule(
        "self.minNodes <= self.maxNodes",
        "minNodes must be less than or equal to maxNodes",
        field_path=".minNodes",
    )
)
@dataclass(frozen=True)
class Elastic:
    """Elastic range: torchrun --nnodes=MIN:MAX; the controller moves the node count inside it."""

    min_nodes: int = field(
        metadata=api(
            "Fewest nodes the job runs on.", schema={"minimum": 1, "maximum": MAX_NODES, "format": "int32"}
        )
    )
    max_nodes: int = field(
        metadata=api(
            "Most nodes the job runs on.", schema={"minimum": 1, "maximum": MAX_NODES, "format": "int32"}
        )
    )
