"""W4 chaos, small, in the suite: every job ends exactly once, as it should, while the controller
is killed again and again, kube-apiserver restarts and an etcd compaction forces every watch to
410 Gone.

The test runs the benchmark's own workload, hack/bench/chaos.py, on this session's control plane
in the test's namespace, and its verdict, hack/bench/chaoscheck.py (its docstring lists what
counts as a violation): 40 two-node jobs whose kwok workers succeed after 2 s, two controller
replicas electing on one Lease (3 / 2 / 0.4 s, so a failover takes ~3 s, not the shipped 15),
10 SIGKILLs of the leader at random moments (each replaced by a new replica), one kube-apiserver
restart and one compaction. It runs as a program, not imported: the benchmark's modules import
their siblings by name (they are run from hack/bench), and the run starts its controllers as
processes anyway. The shared API server and etcd are restarted as test_runtime.py already does:
the suite runs one test at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from testbed import REPO, Cluster

JOBS, KILLS = 40, 10


def test_every_job_ends_exactly_once_through_kills_an_apiserver_restart_and_a_compaction(
    cluster: Cluster,
    crds: Path,
    namespace: str,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    result_file = tmp_path / "result.json"
    command = [
        sys.executable,
        str(REPO / "hack" / "bench" / "chaos.py"),
        "--kubeconfig",
        str(cluster.kubeconfig),
    ]
    command += ["--namespace", namespace, "--jobs", str(JOBS), "--kills", str(KILLS), "--lease", "3,2,0.4"]
    command += ["--kill-gap", "2", "--duration", "2s", "--logs", str(tmp_path / "logs")]
    command += ["--settle-timeout", "180"]  # a stuck job is a violation, reported before pytest's timeout
    command += ["--json", str(result_file)]
    proc = subprocess.run(
        command, cwd=REPO / "hack" / "bench", capture_output=True, text=True, timeout=540, check=False
    )
    output = f"{proc.stdout}\n{proc.stderr[-5000:]}"
    assert result_file.exists(), output
    result = json.loads(result_file.read_text())

    # the chaos happened as asked (else a clean verdict proves nothing)
    assert result["jobs"] == JOBS
    assert result["kills"] == KILLS, output
    assert (result["apiserver_restarts"], result["compactions"]) == (1, 1), output
    assert result["recorder_410s_after_compaction"] >= 1, f"the compaction forced no 410\n{output}"
    assert len(result["failover_lease_s"]) == KILLS, output

    assert result["violation_total"] == 0, "\n".join(result["details"]) + f"\n{output}"
    assert proc.returncode == 0, output
    record_property(
        "note",
        f"chaos: {JOBS} jobs, {KILLS} kills, 1 apiserver restart, 1 compaction: 0 violations; failover"
        f" p50 {result['failover_p50_s']} s; {len(result['exits'])} replicas exited on their own;"
        f" {result['wall_s']} s; not ours (hack/bench/chaoscheck.py): {result['seen'] or 'nothing'}",
    )
