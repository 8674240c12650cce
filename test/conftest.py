"""Fixtures shared by every test.

`cluster` starts the real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok with 4 fake 8-GPU nodes) once per test session in a fresh state directory,
and stops it at the end. `namespace` gives each test its own namespace, deleted afterwards (the
test ends once its pods are gone; the rest of the namespace goes in the background).
Every run also gets two plugins: the skip policy (an unexpected skip fails the session) and
the summary notes (`record_property("note", text)` is printed at the end).
Unit tests never touch these fixtures, so `pytest test/unit` needs no control plane.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest
import skip_policy
import summary_notes
from testbed import CONTROLPLANE, Cluster, cache_dir, kubectl_binary

from controller.metrics.registry import ControllerMetrics
from controller.rest import RESTClient, load_config


def pytest_configure(config: pytest.Config) -> None:
    # a skip not listed in test/expected_skips.txt fails the session (test/skip_policy.py)
    skip_policy.register(config)
    # record_property("note", text) lands in the run's summary (test/summary_notes.py)
    summary_notes.register(config)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    run_dir = cache_dir() / f"run-test-{os.getpid()}"
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {**os.environ, "TORCHRUN_RUN_DIR": str(run_dir)}
    kubectl = kubectl_binary()
    try:
        subprocess.run([str(CONTROLPLANE), "up"], env=env, check=True, timeout=1800)
        yield Cluster(run_dir=run_dir, kubeconfig=run_dir / "admin.kubeconfig", kubectl_path=kubectl)
    finally:
        subprocess.run([str(CONTROLPLANE), "down"], env=env, check=False, timeout=120)
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def rest(cluster: Cluster) -> RESTClient:
    """A RESTClient on the admin kubeconfig with its own metrics registry."""
    return RESTClient(load_config(str(cluster.kubeconfig)), qps=500, burst=1000, metrics=ControllerMetrics())


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    # returns once the namespace's pods are gone, so one test's pods never hold GPUs another test
    # needs; the namespace itself finishes terminating in the background (Cluster.delete_namespace)
    cluster.delete_namespace(name)
