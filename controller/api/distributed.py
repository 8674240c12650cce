"""How a job's processes find each other and how far it may stretch: `distributed`, `elastic`.

torchrun's rendezvous is `c10d` by default (a TCP store on node 0, at `<job>-0.<job>:rdzvPort`);
`etcd-v2` needs an etcd serving the v2 API, either the user's (`rdzvEndpoint`) or one the
controller runs for the job (`managedEtcd`). CEL rules reject every other combination at
admission. `distributed.maxRestarts` is torchrun's in-node restart count, not whole-job restarts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from controller.api.fields import Rule, api, cel

MAX_NODES = 1024


class Backend(str, enum.Enum):
    NCCL = "nccl"
    GLOO = "gloo"


class RdzvBackend(str, enum.Enum):
    C10D = "c10d"
    ETCD_V2 = "etcd-v2"


_RDZV_RULES = (
    Rule(
        "self.rdzvBackend != 'etcd-v2' || has(self.rdzvEndpoint) || self.managedEtcd",
        "etcd-v2 rendezvous needs rdzvEndpoint (host:port of an etcd serving the v2 API) "
        "or managedEtcd: true",
        field_path=".rdzvEndpoint",
        reason="FieldValueRequired",
    ),
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
            "host:port of the etcd for etcd-v2 rendezvous.",
            schema={"maxLength": 261, "pattern": r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?:[0-9]{1,5}$"},
        ),
    )
    managed_etcd: bool = field(
        default=False,
        metadata=api(
            "For etcd-v2 without rdzvEndpoint: the controller runs an etcd with the v2 API for the job."
        ),
    )
    rdzv_port: int = field(
        default=29400,
        metadata=api("Port of the c10d rendezvous on node 0.", schema={"minimum": 1, "maximum": 65535}),
    )
    max_restarts: int = field(
        default=0,
        metadata=api(
            "torchrun --max-restarts: restarts of the worker processes inside a node.",
            schema={"minimum": 0, "maximum": 100, "format": "int32"},
        ),
    )


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
