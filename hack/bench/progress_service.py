"""The reporter's final flush through the shipped progress Service, N runs in a row (issue 30, 7).

    python hack/bench/progress_service.py [--runs 20] [--service shipped|every-replica]

Root only; it uses realnode-0 (run it under `flock /tmp/realnode.lock` beside other runs of it). It
starts a control plane of its own with the real node (kube-proxy, the API server reachable from
pods), runs the shipped Deployment's two controller replicas as pods there, and runs `--runs`
jobs one after another whose worker reports 20 steps and exits right after the last one (written
at its exit: the reporter's final flush on SIGTERM pushes it unless its regular push, at most one
per 2 s, came first), through the Service (its DNS name, its
ClusterIP, kube-proxy). It prints one row per run (the step the job's status ended at, seconds)
and the reports each replica answered, by HTTP status. `--service every-replica` runs the
progress Service as it was before the leader label (selecting both replicas), for comparison.
The shared steps are test/e2e/progressservice.py's (test_realnode_progress_service.py runs 3).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "test"), str(REPO / "test" / "e2e")]

from common import table  # noqa: E402
from progressservice import (  # noqa: E402
    STEPS,
    endpoints,
    final_step_run,
    install,
    leader_pod,
    make_queue,
    project,
    reports,
)
from realnodes import real_node  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--service", choices=("shipped", "every-replica"), default="shipped")
    args = parser.parse_args()
    with real_node("psvc-bench") as real, tempfile.TemporaryDirectory() as tmp:
        cluster = real.cluster
        install(real, service_selects_every_replica=args.service == "every-replica")
        leader = leader_pod(cluster)
        print(f"leader {leader}; the progress Service routes to {sorted(endpoints(cluster))}", flush=True)
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        cluster.create_namespace(namespace)
        queue = make_queue(real)
        before = reports(cluster)
        rows, landed = [], 0
        for i in range(args.runs):
            run = final_step_run(real, namespace, queue, f"final-{i}", project(Path(tmp)))
            ok = run.last_step == STEPS
            landed += ok
            landed_text = "yes" if ok else "NO"
            seconds = f"{run.seconds:.1f}"
            rows.append([i + 1, run.last_step, landed_text, run.leader, run.upload_retries, seconds])
            print(f"run {i + 1}: step {run.last_step}/{STEPS} ({run.seconds:.1f}s)", flush=True)
        after = reports(cluster)
        cluster.delete_namespace(namespace)
    print()
    print(table(["run", "final step", "landed", "leader", "upload retries", "seconds"], rows))
    print()
    answered = []
    for pod, counts in sorted(after.items()):
        delta = {code: int(n - before.get(pod, {}).get(code, 0.0)) for code, n in counts.items()}
        role = "leader" if pod == leader else "standby"
        answered.append([pod, role, delta.get("200", 0), delta.get("503", 0), sum(delta.values())])
    print(table(["replica", "role", "200", "503", "all reports"], answered))
    print(f"\nService {args.service}: the final step landed in {landed} of {args.runs} runs")
    return 0 if landed == args.runs else 1


if __name__ == "__main__":
    raise SystemExit(main())
