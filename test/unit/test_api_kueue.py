"""api.kueue: the controller reads Kueue Workloads in the newest version the cluster serves."""

from __future__ import annotations

from controller.api.kueue import API_VERSIONS, WORKLOAD_VERSIONS, workloads_served

KUEUE_014 = {"kueue.x-k8s.io/v1beta1"}
KUEUE_017 = {"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"}


def test_the_newest_served_version_is_read() -> None:
    assert workloads_served(KUEUE_017.__contains__) == WORKLOAD_VERSIONS[0]
    assert WORKLOAD_VERSIONS[0].api_version == "kueue.x-k8s.io/v1beta2"
    chosen = workloads_served(KUEUE_014.__contains__)
    assert chosen is not None and chosen.api_version == "kueue.x-k8s.io/v1beta1"
    assert workloads_served(lambda gv: False) is None


def test_every_version_names_the_same_resource() -> None:
    assert {(r.group, r.plural, r.kind, r.namespaced) for r in WORKLOAD_VERSIONS} == {
        ("kueue.x-k8s.io", "workloads", "Workload", True)
    }
    assert tuple(r.api_version for r in WORKLOAD_VERSIONS) == API_VERSIONS
