"""Fixtures shared by every test.

`cluster` starts the real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok with 4 fake 8-GPU nodes) once per test session in a fresh state directory,
and stops it at the end. `namespace` gives each test its own namespace, deleted afterwards (the
test ends once its pods are gone; the rest of the namespace goes in the background).
Every run also gets two plugins: the skip policy (an unexpected skip fails the session) and
the summary notes (`record_property("note", text)` is printed at the end, and so is every stand-in
a test ran against, with the test: see test/summary_notes.py). A test whose namespace had pods or
claims the test bed's node agent served (it plays the kubelet and the storage driver on kwok's
nodes) is listed under that stand-in by `namespace` itself. A failing test's report ends with the
tails of the controller programs' logs running at that moment (`pytest_runtest_makereport`).
Unit tests never touch these fixtures, so `pytest test/unit` needs no control plane.

The tiers are marked here, by directory, so no module can forget its marker: everything in
test/integration and test/e2e is `integration` (the control plane, programs and images built by
hack/), test/e2e is also `e2e`, and test/e2e/test_realnode*.py are also `realnode` (root, and a
real node on this host); `-m "not integration"` is the unit tests alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
import skip_policy
import summary_notes
from summary_notes import KUBELET, STAND_IN, stand_in
from testbed import (
    CONTROLPLANE,
    Cluster,
    cache_dir,
    kubectl_binary,
    live_logs,
    real_node_index,
    shown_on_failure,
)

from controller.metrics.registry import ControllerMetrics
from controller.rest import RESTClient, load_config

TEST_DIR = Path(__file__).resolve().parent
TIERS = {
    "integration": ("integration", "e2e"),
    "e2e": ("e2e",),
    "realnode": ("e2e/test_realnode",),  # test_realnode.py, test_realnode_*.py
}


def tiers(path: Path) -> list[str]:
    """The tier markers of a test file, by where it lives under test/."""
    where = path.resolve().relative_to(TEST_DIR).as_posix()
    return [tier for tier, places in TIERS.items() if any(where.startswith(p) for p in places)]


def worker_group(path: Path, real_node: int = 0) -> str | None:
    """The pytest-xdist group a test runs in (`--dist loadgroup`), from its file and, for a
    real-node test, the node it runs on (`real_node`, its `@pytest.mark.real_node(N)`): one group
    per real node (`realnode-N`: one worker runs that node's tests one after another, so a node is
    up once; two nodes may run beside each other, on two workers), one per control-plane module
    (its module-scoped fixtures and its tests' order stay on one worker), none for a unit test (any
    worker, any order)."""
    marks = tiers(path)
    if "realnode" in marks:
        return f"realnode-{real_node}"
    if "integration" in marks:
        return path.resolve().relative_to(TEST_DIR).as_posix()
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test's tiers and worker group, and puts the real-node tests first, each in its
    order: they are the longest chains (one worker runs each node's, one test after another), so
    hack/test.sh's workers with two real nodes (`--no-loadscope-reorder`: groups in the order of
    their first test) start them first, and the rest fill the other workers and the time after."""
    for item in items:
        for tier in tiers(item.path):
            item.add_marker(tier)
        group = worker_group(item.path, real_node_index(item))
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: "realnode" not in tiers(item.path))  # stable: the rest keep their order


LOG_TAIL_LINES = 80


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A failing test's report ends with the last LOG_TAIL_LINES of every program's log the test
    bed shows on failure (testbed.live_logs: controller programs, the real Kueue) that was
    running when it failed: their temporary directories are gone by the time anyone reads it."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for log in live_logs():
        try:
            tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        except OSError as exc:
            tail = [f"unreadable: {exc}"]
        report.sections.append((f"tail of {log.name} ({log})", "\n".join(tail)))


def pytest_configure(config: pytest.Config) -> None:
    # a skip not listed in test/expected_skips.txt fails the session (test/skip_policy.py)
    skip_policy.register(config)
    # record_property("note", text) and the stand-ins land in the run's summary (test/summary_notes.py)
    summary_notes.register(config)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    run_dir = cache_dir() / f"run-test-{os.getpid()}"
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {**os.environ, "TORCHRUN_RUN_DIR": str(run_dir)}
    kubectl = kubectl_binary()
    try:
        subprocess.run([str(CONTROLPLANE), "up"], env=env, check=True, timeout=1800)
        # the node agent plays the kubelet and the storage driver: a test that waited on a pod or
        # a claim shows what it did last
        with shown_on_failure(run_dir / "logs" / "node-agent.log"):
            yield Cluster(run_dir=run_dir, kubeconfig=run_dir / "admin.kubeconfig", kubectl_path=kubectl)
    finally:
        subprocess.run([str(CONTROLPLANE), "down"], env=env, check=False, timeout=120)
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def rest(cluster: Cluster) -> RESTClient:
    """A RESTClient on the admin kubeconfig with its own metrics registry."""
    return RESTClient(load_config(str(cluster.kubeconfig)), qps=500, burst=1000, metrics=ControllerMetrics())


@pytest.fixture
def namespace(cluster: Cluster, record_property: Callable[[str, object], None]) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    agent_log = cluster.node_agent_log_size()
    cluster.create_namespace(name)
    yield name
    # returns once the namespace's pods are gone, so one test's pods never hold GPUs another test
    # needs; the namespace itself finishes terminating in the background (Cluster.delete_namespace)
    try:
        cluster.delete_namespace(name)
    finally:
        # the node agent played the kubelet (or the storage driver) for this test's pods or claims
        if cluster.served_by_node_agent(name, since=agent_log):
            record_property(STAND_IN, stand_in(KUBELET))
