"""Reports reach the leader through the shipped Service, as the cluster routes them (issue 30, 7).

The module starts a control plane of its own with the real node (test/e2e/progressservice.py):
kube-proxy routes ClusterIPs and the API server is reachable from the node's pods. The shipped
Deployment runs two controller replicas as pods on the node (in-cluster config through the
`kubernetes` Service); the shipped progress Service selects the leader's label. A job's worker
reports its steps and exits right after the last one (written at its exit: the reporter's final
flush on SIGTERM pushes it, unless its regular push, at most one per 2 s, came first) — through the
Service's DNS name and ClusterIP. Three runs: the last step lands
every time, and not one report reaches the standby (no replica answers 503).
Test-only changes to the shipped manifests are listed in progressservice.py (image, node
placement, --sync-image, --progress-period); the Deployment's podAntiAffinity is only
preferred, so both replicas run on the one node as shipped. Nothing here is skipped: a machine
that cannot run the real node fails the fixture with the control plane's own words.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from progressservice import (
    STEPS,
    endpoints,
    final_step_run,
    install,
    install_chart,
    leader_pod,
    make_queue,
    project,
    remove_config,
    replicas,
    reports,
)
from realnodes import RealNode, real_node_or_fail
from testbed import helm_binary

RUNS = 3


@pytest.fixture(scope="module")
def real() -> Iterator[RealNode]:
    with real_node_or_fail("psvc") as node:
        yield node


def test_in_cluster_config_works_from_a_pod_through_the_kubernetes_service(real: RealNode) -> None:
    """Both replicas are Ready, so each listed and watched the API from its pod (they run with no
    kubeconfig: KUBERNETES_SERVICE_HOST is the `kubernetes` ClusterIP, routed by kube-proxy)."""
    install(real)
    pods = replicas(real.cluster)
    assert len(pods) == 2 and {p["spec"]["nodeName"] for p in pods} == {real.name}
    env = {e["name"] for e in pods[0]["spec"]["containers"][0].get("env") or ()}
    assert "KUBECONFIG" not in env
    slices = real.cluster.get(
        "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes"
    )
    (address,) = {a for s in slices["items"] for e in s["endpoints"] for a in e["addresses"]}
    node = real.cluster.get("node", real.name)
    assert address in {a["address"] for a in node["status"]["addresses"]}


def test_the_final_step_lands_through_the_service_and_no_report_reaches_the_standby(
    real: RealNode, tmp_path: Path
) -> None:
    cluster = real.cluster
    install(real)  # already there: a no-op apply, and the wait for a leader
    leader = leader_pod(cluster)
    assert endpoints(cluster) == {leader}, "the progress Service routes to the leader alone"
    namespace = f"rn-{uuid.uuid4().hex[:8]}"
    cluster.create_namespace(namespace)
    queue = make_queue(real)
    before = reports(cluster)
    try:
        runs = [final_step_run(real, namespace, queue, f"final-{i}", project(tmp_path)) for i in range(RUNS)]
    finally:
        cluster.delete_namespace(namespace)
    after = reports(cluster)
    answered = {
        pod: {code: n - before.get(pod, {}).get(code, 0.0) for code, n in counts.items()}
        for pod, counts in after.items()
    }
    assert [r.last_step for r in runs] == [STEPS] * RUNS, (runs, answered)
    assert {r.leader for r in runs} == {leader}, runs  # no failover happened: one leader throughout
    standby = [pod for pod in answered if pod != leader]
    assert len(standby) == 1
    # every report went to the leader, accepted; none reached the standby, none was refused
    assert sum(answered[standby[0]].values()) == 0, answered
    assert answered[leader].get("503", 0) == 0 and answered[leader].get("200", 0) >= RUNS, answered


def test_the_helm_chart_installs_a_controller_that_leads_and_trains_in_its_own_namespace(
    real: RealNode, tmp_path: Path
) -> None:
    """charts/torchrun-controller instead of config/ (removed first: one controller at a time), in
    a namespace other than torchrun-system: the chart's replicas run on the node, one leads, and a
    job's reporter reaches it through the progress URL the chart points at its own namespace
    (test-only values: progressservice.chart_test_values). `helm uninstall` then takes the
    controller away."""
    cluster, system = real.cluster, "torchrun-ml"
    remove_config(real)
    install_chart(real, system, tmp_path / "values.yaml")
    try:
        leader = leader_pod(cluster, system)
        assert endpoints(cluster, system) == {leader}
        args = replicas(cluster, system)[0]["spec"]["containers"][0]["args"]
        assert f"--progress-url=https://torchrun-controller-progress.{system}.svc:9443/v1/progress" in args
        namespace = f"rn-{uuid.uuid4().hex[:8]}"
        cluster.create_namespace(namespace)
        queue = make_queue(real)
        try:
            run = final_step_run(real, namespace, queue, "chart", project(tmp_path), system=system)
        finally:
            cluster.delete_namespace(namespace)
        assert run.last_step == STEPS, run
        assert run.leader == leader, run
        answered = reports(cluster, system)
        assert answered[leader].get("200", 0) >= 1, answered
    finally:
        helm = [str(helm_binary()), "--kubeconfig", str(cluster.kubeconfig), "--namespace", system]
        subprocess.run([*helm, "uninstall", "torchrun-controller", "--wait"], check=False, timeout=300)
    assert not replicas(cluster, system), "helm uninstall left controller pods"
