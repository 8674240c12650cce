"""The test bed is real: kube-scheduler places pods by GPU, kwok runs them as told, the Job
controller counts them, and the garbage collector removes what a deleted Job owned; and
`hack/controlplane.sh` run from a plain shell picks a Python that can run its node agent."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from testbed import CONTROLPLANE, REPO, Cluster, condition, wait_until


def indexed_job(
    name: str, completions: int, gpus: int, annotations: dict[str, str], backoff_limit: int = 0
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": completions,
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


def job_condition(cluster: Cluster, ns: str, name: str, ctype: str) -> dict[str, Any] | None:
    cond = condition(cluster.get("job", name, "-n", ns), ctype)
    return cond if cond and cond["status"] == "True" else None


def pods_of(cluster: Cluster, ns: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", ns, "-l", f"job-name={job}")["items"]
    return items


def test_nodes_are_fake_gpu_nodes(cluster: Cluster) -> None:
    nodes = cluster.get("nodes")["items"]
    assert len(nodes) == 4
    for node in nodes:
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert (condition(node, "Ready") or {}).get("status") == "True", node["status"]
    assert cluster.kubectl("version", "-o", "json").stdout.count("v1.34") >= 1


def test_indexed_job_runs_on_two_nodes_and_is_garbage_collected(cluster: Cluster, namespace: str) -> None:
    cluster.apply(
        indexed_job("two", 2, 8, {"kwok.torchrun.ai/outcome": "succeed", "kwok.torchrun.ai/duration": "2s"}),
        namespace,
    )
    wait_until(lambda: job_condition(cluster, namespace, "two", "Complete"), 60, message="Job Complete")
    pods = pods_of(cluster, namespace, "two")
    assert len(pods) == 2
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    assert len({p["spec"]["nodeName"] for p in pods}) == 2, "8 GPUs each: they cannot share a node"
    indexes = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods}
    assert indexes == {"0", "1"}

    cluster.kubectl("delete", "job", "two", "-n", namespace, "--cascade=background")
    wait_until(lambda: not pods_of(cluster, namespace, "two"), 60, message="pods garbage-collected")


def test_failing_pod_exit_code_and_backoff_limit(cluster: Cluster, namespace: str) -> None:
    annotations = {
        "kwok.torchrun.ai/outcome": "fail",
        "kwok.torchrun.ai/exit-code": "3",
        "kwok.torchrun.ai/duration": "500ms",
    }
    cluster.apply(indexed_job("fails", 1, 1, annotations, backoff_limit=1), namespace)
    cond = wait_until(lambda: job_condition(cluster, namespace, "fails", "Failed"), 90, message="Job Failed")
    assert cond["reason"] == "BackoffLimitExceeded"
    pods = pods_of(cluster, namespace, "fails")
    assert len(pods) == 2, "one retry before the backoff limit"
    for pod in pods:
        assert pod["status"]["phase"] == "Failed"
        term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert term["exitCode"] == 3


def test_pod_asking_too_many_gpus_is_unschedulable(cluster: Cluster, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "greedy"},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "16"}}}
            ]
        },
    }
    cluster.apply(pod, namespace)

    def unschedulable() -> dict[str, Any] | None:
        cond = condition(cluster.get("pod", "greedy", "-n", namespace), "PodScheduled")
        return cond if cond and cond["status"] == "False" else None

    cond = wait_until(unschedulable, 30, message="PodScheduled=False")
    assert cond["reason"] == "Unschedulable"
    assert "nvidia.com/gpu" in cond["message"]
    assert cluster.get("pod", "greedy", "-n", namespace)["status"]["phase"] == "Pending"


def test_a_plain_shell_at_the_repository_root_gets_a_python_with_the_projects_dependencies(
    tmp_path: Path,
) -> None:
    """The README's `hack/controlplane.sh up` from the repository root in a plain shell, whose
    first `python3` is the system one without the project's dependencies: from the root that
    Python imports `controller` (the current directory is on its path), so a probe of that import
    alone chose it and the node agent died on `import structlog`."""
    system = shutil.which("python3", path=os.defpath)
    assert system, f"no python3 on {os.defpath}"
    bare = tmp_path / "bin"
    bare.mkdir()
    for name in ("python", "python3"):  # -S: none of the site-packages, whatever this host installed
        (bare / name).write_text(f'#!/bin/sh\nexec {system} -S "$@"\n')
        (bare / name).chmod(0o755)
    plain = {"HOME": os.environ["HOME"], "PATH": f"{bare}:/usr/bin:/bin"}
    plain |= {k: os.environ[k] for k in ("TORCHRUN_CACHE_DIR", "XDG_CACHE_HOME") if k in os.environ}
    imports = "import controller, structlog; print(controller.__file__)"

    def run(*command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, cwd=cwd, env=plain, capture_output=True, text=True, timeout=900, check=False
        )

    trap = run("python3", "-c", "import controller; import structlog", cwd=REPO)
    assert "No module named 'structlog'" in trap.stderr, "the first python3 must be the bare one"

    chosen = run("bash", str(CONTROLPLANE), "python", cwd=REPO)
    assert chosen.returncode == 0, chosen.stderr
    python = chosen.stdout.strip()
    # from /, so the checkout comes from the interpreter's own path, not from the current directory
    proof = run(python, "-c", imports, cwd=Path("/"))
    assert proof.returncode == 0, f"the node agent's Python {python}: {proof.stderr}"
    assert Path(proof.stdout.strip()).resolve().is_relative_to(REPO)


def test_kube_controller_manager_runs_at_the_client_rate_the_test_bed_was_given(cluster: Cluster) -> None:
    """TORCHRUN_KCM_QPS / TORCHRUN_KCM_BURST reach kube-controller-manager's own client (the rate at
    which its Job controller creates pods); unset, they are Kubernetes' defaults, 20 and 30."""
    pid = (cluster.run_dir / "pids" / "kube-controller-manager.pid").read_text().strip()
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    flags = dict(itertools.pairwise(argv))
    want = (os.environ.get("TORCHRUN_KCM_QPS", "20"), os.environ.get("TORCHRUN_KCM_BURST", "30"))
    assert (flags.get("--kube-api-qps"), flags.get("--kube-api-burst")) == want, argv
