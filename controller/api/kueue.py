"""Kueue's API as the controller speaks it: which Workload version to read, Kueue's labels and
annotations.

Kueue 0.14 serves `kueue.x-k8s.io/v1beta1` alone; current releases (0.17 and 0.18, the test bed's) serve
`v1beta1` and `v1beta2`, which they store. Kueue's CRDs leave conversion between the two to Kueue's
webhook, so a cluster that runs Kueue without it (or whose webhook is down) answers a `v1beta1`
read of a `v1beta2` object with the stored body relabelled. So the controller never reads an
older version than the newest one served: `workloads_served(served)` is the first of
`WORKLOAD_VERSIONS` (newest first) that discovery serves. The fields the controller touches (the
`kueue.x-k8s.io/job-uid` label, `spec.active`, `status.conditions` `QuotaReserved`/`Admitted`)
mean the same in both.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.meta import Resource

GROUP = "kueue.x-k8s.io"
WORKLOAD_VERSIONS: tuple[Resource, ...] = tuple(
    Resource(GROUP, version, "workloads", "Workload") for version in ("v1beta2", "v1beta1")
)
API_VERSIONS: tuple[str, ...] = tuple(r.api_version for r in WORKLOAD_VERSIONS)
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on a Workload: the UID of the Job it admits
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # on a Job: the LocalQueue it is submitted to
# on a pod template: the topology level (a node label) whose one domain must / should hold its pods
REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
# on a Job (and on the Workloads Kueue makes for it, when its ElasticJobsViaWorkloadSlices gate is
# on): run it as workload slices; the scheduling gate holds each new pod until its slice is admitted
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
ELASTIC_JOB_GATE = "kueue.x-k8s.io/elastic-job"


def workloads_served(served: Callable[[str], bool]) -> Resource | None:
    """The newest Workload version that `served(group_version)` says the API server serves;
    None when it serves none (Kueue is not installed)."""
    return next((r for r in WORKLOAD_VERSIONS if served(r.api_version)), None)
