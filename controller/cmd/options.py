"""The `torchrun-controller` command line (SPEC §7), parsed and checked into `ControllerOptions`.

A flag error is one line on stderr naming the flag and its rule, and exit code 2 (a usage error,
as argparse and every Unix tool use it; a start-up that fails later exits 1): the full usage is
what `--help` is for, and 25 lines of it above the one that matters hide that one. A flag must be
spelled out: no prefix of a flag is taken for it, so a mistyped flag is an error, not a guess.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeVar

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
    progress_bind_address: str
    progress_cert_dir: str | None
    progress_url: str
    progress_period: float
    progress_job_metrics: bool


T = TypeVar("T")
_DOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _rule(kind: Callable[[str], T], accepts: Callable[[T], object], says: str) -> Callable[[str], T]:
    """An argparse `type`: the flag's text read by `kind`, refused (saying the rule) unless
    `accepts` it."""

    def parse(text: str) -> T:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {says}, got {text!r}") from None
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"must be {says}, got {text!r}")
        return value

    return parse


def _address(text: str) -> bool:
    host, colon, port = text.rpartition(":")
    return bool(colon) and port.isdigit() and int(port) <= 65535 and ":" not in host


POSITIVE_INT = _rule(int, lambda v: v > 0, "a positive integer")
COUNT = _rule(int, lambda v: v >= 0, "an integer >= 0")
POSITIVE = _rule(float, lambda v: math.isfinite(v) and v > 0, "a positive number")
SECONDS = _rule(float, lambda v: math.isfinite(v) and v > 0, "a positive number of seconds")
SECONDS_OR_OFF = _rule(float, lambda v: math.isfinite(v) and v >= 0, "a number of seconds >= 0 (0: off)")
FRACTION = _rule(float, lambda v: 0 < v <= 1, "a number in (0, 1]")
DNS_NAME = _rule(str, _DOMAIN.fullmatch, "a DNS name such as cluster.local")
ADDRESS = _rule(str, _address, "HOST:PORT (an empty HOST: every interface), PORT from 0 to 65535")
ADDRESS_OR_OFF = _rule(str, lambda v: v == "" or _address(v), "HOST:PORT, or empty (off)")
URL = _rule(str, lambda v: v == "" or v.startswith("https://"), "an https:// URL, or empty (off)")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")  # one line, no usage: see the module doc


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="torchrun-controller",
        allow_abbrev=False,
        description="Kubernetes operator for distributed PyTorch training (TorchrunQueue, TorchrunJob).",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file; in-cluster config (or ~/.kube/config) when absent")
    p.add_argument("--threadiness", type=POSITIVE_INT, default=4, help="reconcile worker threads (default 4)")
    p.add_argument(
        "--autoclean",
        action="store_true",
        help="delete a finished job's pods and ephemeral workspace (the TorchrunJob stays)",
    )
    p.add_argument(
        "--restart-limit",
        type=COUNT,
        default=10,
        help="cap on whole-job restarts, over each job's failurePolicy.maxRestarts (default 10)",
    )
    p.add_argument(
        "--resync-period",
        type=SECONDS_OR_OFF,
        default=300.0,
        help="seconds between informer resyncs from the cache, 0 to disable (default 300)",
    )
    p.add_argument(
        "--gc-interval",
        type=SECONDS,
        default=60.0,
        help="seconds between garbage-collection passes (default 60)",
    )
    p.add_argument(
        "--max-load-desired",
        type=FRACTION,
        default=0.97,
        help="cluster GPU load the elastic autoscaler aims for (default 0.97)",
    )
    p.add_argument(
        "--autoscaler-period",
        type=SECONDS,
        default=30.0,
        help="seconds between elastic autoscaler passes (default 30)",
    )
    p.add_argument("--namespace", default=None, help="watch only this namespace (default: all)")
    p.add_argument(
        "--metrics-addr",
        type=ADDRESS,
        default="0.0.0.0:8080",
        help="address of /metrics (default 0.0.0.0:8080)",
    )
    p.add_argument(
        "--health-addr",
        type=ADDRESS,
        default="0.0.0.0:8081",
        help="address of /healthz and /readyz (default 0.0.0.0:8081)",
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
    p.add_argument("--leader-elect-lease-duration", dest="lease_duration", type=SECONDS, default=15.0)
    p.add_argument("--leader-elect-renew-deadline", dest="renew_deadline", type=SECONDS, default=10.0)
    p.add_argument("--leader-elect-retry-period", dest="retry_period", type=SECONDS, default=2.0)
    p.add_argument("--kube-api-qps", type=POSITIVE, default=50.0, help="client-side QPS limit (default 50)")
    p.add_argument("--kube-api-burst", type=POSITIVE_INT, default=100, help="client-side burst (default 100)")
    p.add_argument(
        "--sync-image",
        default=DEFAULT_SYNC_IMAGE,
        help="image of sync pods and of the workers' code-copying init container, unless the queue names"
        f" one: it must have `python -m controller.sync` (default {DEFAULT_SYNC_IMAGE}, this controller's)",
    )
    p.add_argument(
        "--upload-timeout",
        type=SECONDS,
        default=3600.0,
        help="seconds a sync pod waits for `kubectl torchrun` to upload (default 3600)",
    )
    p.add_argument(
        "--claim-bind-timeout",
        type=SECONDS,
        default=300.0,
        help="seconds a job's PVC may stay unbound before WorkspaceReady=False ClaimNotBound (default 300)",
    )
    p.add_argument(
        "--cluster-domain",
        type=DNS_NAME,
        default=DEFAULT_CLUSTER_DOMAIN,
        help="the cluster's DNS domain (the kubelets' clusterDomain), part of the c10d rendezvous"
        f" endpoint <job>-0.<job>.<namespace>.svc.<domain> (default {DEFAULT_CLUSTER_DOMAIN})",
    )
    p.add_argument(
        "--progress-bind-address",
        type=ADDRESS_OR_OFF,
        default="",
        help="HTTPS address of the progress endpoint the workers' reporter sidecars POST to (e.g."
        " 0.0.0.0:9443; default off: no report is accepted)",
    )
    p.add_argument(
        "--progress-cert-dir",
        default=None,
        help="directory with tls.crt and tls.key for the progress endpoint (e.g. a cert-manager Secret;"
        " served anew to the next connection when they change), and optionally ca.crt, which reporters"
        " then verify the endpoint with (read at start); default: a self-signed certificate made at start",
    )
    p.add_argument(
        "--progress-url",
        type=URL,
        default="",
        help="the progress endpoint's URL as the worker pods reach it (TORCHRUN_PROGRESS_URL), e.g."
        " https://torchrun-controller-progress.torchrun-system.svc:9443/v1/progress (default: none,"
        " reporters serve /metrics only)",
    )
    p.add_argument(
        "--progress-period",
        type=SECONDS,
        default=30.0,
        help="a job's status.progress changes at most once per this many seconds (default 30)",
    )
    p.add_argument(
        "--progress-job-metrics",
        action="store_true",
        help="export series per job: torchrun_job_progress_percent, torchrun_job_goodput_ratio / _seconds, "
        "torchrun_job_condition, torchrun_job_restarts / _restart_limit and "
        "torchrun_job_checkpoint_timestamp_seconds (the job alerts need them)",
    )
    p.add_argument("--log-level", choices=LEVELS, default="info")
    p.add_argument("--log-format", choices=("json", "console"), default="json")
    return p


def parse(argv: list[str] | None = None) -> ControllerOptions:
    """Parse and check `argv`; a bad flag exits 2 with one line on stderr."""
    p = parser()
    ns = p.parse_args(argv)
    # client-go's rules: the deadline fits in the lease, and a jittered retry fits in the deadline
    if not ns.lease_duration > ns.renew_deadline > 1.2 * ns.retry_period:
        p.error(
            "need --leader-elect-lease-duration > --leader-elect-renew-deadline"
            " > 1.2 * --leader-elect-retry-period"
            f" (got {ns.lease_duration:g}, {ns.renew_deadline:g}, {ns.retry_period:g})"
        )
    return ControllerOptions(**vars(ns))
