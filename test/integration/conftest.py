"""Integration fixtures: the CRDs installed once, and an in-process controller per test.

`controller_app` runs the real `torchrun-controller` App (informers, workqueues, reconcilers,
GC) in this process, scoped to the test's namespace so tests never see each other's jobs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from testbed import REPO, Cluster

from controller.cmd.main import App
from controller.cmd.options import parse
from controller.metrics.registry import ControllerMetrics


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> Path:
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crd"))
    cluster.wait_established()
    return REPO / "crd"


@contextmanager
def running_app(cluster: Cluster, namespace: str, *flags: str) -> Iterator[App]:
    opts = parse(
        [
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--namespace",
            namespace,
            "--gc-interval",
            "1",
            "--threadiness",
            "4",
            *flags,
        ]
    )
    app = App(opts, ControllerMetrics())
    stop = threading.Event()
    app.start_caches(stop)
    app.run(stop)
    try:
        yield app
    finally:
        stop.set()
        app.shutdown()


@pytest.fixture
def start_controller(cluster: Cluster, crds: Path, namespace: str) -> Iterator[Callable[..., App]]:
    """Start the controller for this test's namespace (with extra flags); stopped afterwards."""
    stack: list[Any] = []

    def start(*flags: str) -> App:
        cm = running_app(cluster, namespace, *flags)
        app = cm.__enter__()
        stack.append(cm)
        return app

    yield start
    while stack:
        stack.pop().__exit__(None, None, None)
