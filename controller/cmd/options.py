"""The `torchrun-controller` command line (SPEC §7), parsed and checked into `ControllerOptions`."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from controller.log import LEVELS
from controller.torchrunjob.manifests.rendezvous import DEFAULT_CLUSTER_DOMAIN
from controller.torchrunjob.manifests.storage import DEFAULT_SYNC_IMAGE


@dataclass(frozen=True)
class ControllerOptions:
    kubeconfig: str | None
    threadiness: int
    autoclean: bool
    restart_limit: int
    resync_period: float
    gc_interval: float
    max_load_desired: float
    autoscaler_period: float
    namespace: str | None
    metrics_addr: str
    health_addr: str
    leader_elect: bool
    leader_elect_namespace: str
    leader_elect_identity: str
    lease_duration: float
    renew_deadline: float
    retry_period: float
    kube_api_qps: float
    kube_api_burst: int
    log_level: str
    log_format: str
    sync_image: str
    upload_timeout: float
    claim_bind_timeout: float
    cluster_domain: str


_DOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchrun-controller",
        description="Kubernetes operator for distributed PyTorch training (TorchrunQueue, TorchrunJob).",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file; in-cluster config (or ~/.kube/config) when absent")
    p.add_argument(
        "--threadiness", type=_positive(int), default=4, help="reconcile worker threads (default 4)"
    )
    p.add_argument(
        "--autoclean",
        action="store_true",
        help="delete a finished job's pods and ephemeral workspace (the TorchrunJob stays)",
    )
    p.add_argument(
        "--restart-limit",
        type=int,
        default=10,
        help="cap on whole-job restarts, over each job's failurePolicy.maxRestarts (default 10)",
    )
    p.add_argument(
        "--resync-period",
        type=float,
        default=300.0,
        help="seconds between informer resyncs from the cache, 0 to disable (default 300)",
    )
    p.add_argument(
        "--gc-interval",
        type=_positive(float),
        default=60.0,
        help="seconds between garbage-collection passes (default 60)",
    )
    p.add_argument(
        "--max-load-desired",
        type=float,
        default=0.97,
        help="cluster GPU load the elastic autoscaler aims for (default 0.97)",
    )
    p.add_argument(
        "--autoscaler-period",
        type=_positive(float),
        default=30.0,
        help="seconds between elastic autoscaler passes (default 30)",
    )
    p.add_argument("--namespace", default=None, help="watch only this namespace (default: all)")
    p.add_argument(
        "--metrics-addr", default="0.0.0.0:8080", help="address of /metrics (default 0.0.0.0:8080)"
    )
    p.add_argument(
        "--health-addr", default="0.0.0.0:8081", help="address of /healthz and /readyz (default 0.0.0.0:8081)"
    )
    p.add_argument(
        "--leader-elect", action="store_true", help="elect a leader on a Lease (run several replicas)"
    )
    p.add_argument(
        "--leader-elect-namespace",
        default="",
        help="namespace of the Lease (default: the pod's namespace, else default)",
    )
    p.add_argument(
        "--leader-elect-identity",
        default="",
        help="this replica's name in the Lease and its API user agent; unique per replica"
        " (default: hostname_random)",
    )
    p.add_argument(
        "--leader-elect-lease-duration", dest="lease_duration", type=_positive(float), default=15.0
    )
    p.add_argument(
        "--leader-elect-renew-deadline", dest="renew_deadline", type=_positive(float), default=10.0
    )
    p.add_argument("--leader-elect-retry-period", dest="retry_period", type=_positive(float), default=2.0)
    p.add_argument(
        "--kube-api-qps", type=_positive(float), default=50.0, help="client-side QPS limit (default 50)"
    )
    p.add_argument(
        "--kube-api-burst", type=_positive(int), default=100, help="client-side burst (default 100)"
    )
    p.add_argument(
        "--sync-image",
        default=DEFAULT_SYNC_IMAGE,
        help="image of sync pods and of the workers' code-copying init container, unless the queue names"
        f" one: it must have `python -m controller.sync` (default {DEFAULT_SYNC_IMAGE}, this controller's)",
    )
    p.add_argument(
        "--upload-timeout",
        type=_positive(float),
        default=3600.0,
        help="seconds a sync pod waits for `kubectl torchrun` to upload (default 3600)",
    )
    p.add_argument(
        "--claim-bind-timeout",
        type=_positive(float),
        default=300.0,
        help="seconds a job's PVC may stay unbound before WorkspaceReady=False ClaimNotBound (default 300)",
    )
    p.add_argument(
        "--cluster-domain",
        default=DEFAULT_CLUSTER_DOMAIN,
        help="the cluster's DNS domain (the kubelets' clusterDomain), part of the c10d rendezvous"
        f" endpoint <job>-0.<job>.<namespace>.svc.<domain> (default {DEFAULT_CLUSTER_DOMAIN})",
    )
    p.add_argument("--log-level", choices=LEVELS, default="info")
    p.add_argument("--log-format", choices=("json", "console"), default="json")
    return p


def parse(argv: list[str] | None = None) -> ControllerOptions:
    """Parse and check `argv`; a bad value exits 2 with one line on stderr."""
    p = parser()
    ns = p.parse_args(argv)

    def fail(message: str) -> NoReturn:
        p.exit(2, f"{p.prog}: error: {message}\n")  # one line: the usage is not the problem

    if not 0 < ns.max_load_desired <= 1:
        fail("--max-load-desired must be in (0, 1]")
    if ns.restart_limit < 0:
        fail("--restart-limit must be >= 0")
    if not _DOMAIN.fullmatch(ns.cluster_domain):
        fail(f"--cluster-domain must be a DNS name such as cluster.local, got {ns.cluster_domain!r}")
    if ns.resync_period < 0:
        fail("--resync-period must be >= 0")
    # client-go's rules: the deadline fits in the lease, and a jittered retry fits in the deadline
    if not ns.lease_duration > ns.renew_deadline > 1.2 * ns.retry_period:
        fail(
            "need --leader-elect-lease-duration > --leader-elect-renew-deadline"
            " > 1.2 * --leader-elect-retry-period"
            f" (got {ns.lease_duration:g}, {ns.renew_deadline:g}, {ns.retry_period:g})"
        )
    return ControllerOptions(**vars(ns))
