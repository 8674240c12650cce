"""End-to-end fixtures: the user's programs as they ship, against the session's control plane.

`controller` runs the real `torchrun-controller` program (a process, as a user installs it)
scoped to the test's namespace; `plugin` runs the real `kubectl-torchrun` console script with
`KUBECONFIG` pointing at the test bed and a project directory as its working directory, exactly
as `kubectl torchrun ...` would be run from a shell.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugincli import PLUGIN, Run, plugin_env
from testbed import REPO, Cluster, controller_program


@pytest.fixture(scope="session")
def e2e_crds(cluster: Cluster) -> Path:
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crd"))
    cluster.wait_established()
    return REPO / "crd"


@pytest.fixture
def controller(
    cluster: Cluster, e2e_crds: Path, namespace: str, tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """The `torchrun-controller` program for this test's namespace; its log is in tmp_path."""
    with controller_program(cluster.kubeconfig, namespace, tmp_path / "controller.log") as proc:
        yield proc


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty project directory (the tests write their files into it)."""
    path = tmp_path / "my-project"
    path.mkdir()
    return path


@pytest.fixture
def plugin(cluster: Cluster, project: Path, namespace: str) -> Run:
    """`plugin("list")`: run `kubectl-torchrun -n <test namespace> list` in the project; the
    finished process (text). `env=` replaces variables, `timeout=` bounds it (default 120 s)."""
    if not PLUGIN.exists():
        pytest.fail(f"{PLUGIN} is missing: the package is not installed in this virtualenv")

    def run(
        *args: str, env: dict[str, str] | None = None, timeout: float = 120, ns: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(PLUGIN), *(["-n", namespace] if ns else []), *args]
        return subprocess.run(
            argv,
            cwd=project,
            env=env or plugin_env(cluster),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run
