"""How the end-to-end tests run `kubectl torchrun`: the console script installed next to this
Python, with `KUBECONFIG` pointing at the test bed (a module of its own, so both the fixtures and
the tests import it without importing a conftest)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from testbed import Cluster

PLUGIN = Path(sys.executable).parent / "kubectl-torchrun"
Run = Callable[..., subprocess.CompletedProcess[str]]


def plugin_env(cluster: Cluster, **extra: str) -> dict[str, str]:
    """The environment of a user whose kubeconfig is the test bed's (`extra` overrides)."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "COLUMNS")}
    return {**env, "KUBECONFIG": str(cluster.kubeconfig), "COLUMNS": "120", **extra}
