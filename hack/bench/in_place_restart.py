"""Restarts in place on the real node, N times in a row, timed beside the recreate path.

    sudo python hack/bench/in_place_restart.py [--runs 20]

Runs `test_a_crashed_rank_restarts_in_place_...` of test/e2e/test_realnode.py N times in one real
node session (`failurePolicy.restartMode: InPlace`, two worker pods, Debian trixie's torch 2.6,
c10d rendezvous, one gloo rank each; rank 1 exits 1 after step 9; it passes when both supervisors
restarted torchrun in the same pods, both ranks resumed from step-8, step 9's loss came out the
same, the restart was counted once and the job succeeded), then the recreate path's test once on
the same crash. Prints each run's outcome, the time from the crash to the first step after the
resume (the container runtime's log timestamps), the tally and the ratio to the recreate path's
time measured in the same session. `--standby-baseline`: every other run without the
supervisors' standby torchrun (the queue's env `TORCHRUN_STANDBY=0`: each generation's torchrun
imports torch afresh), its times apart, and the ratio of the two medians. Needs root (the real
node). CI runs the in-place test twice (TORCHRUN_IN_PLACE_RESTART_RUNS defaults to 2) and the
recreate test once.
"""

from __future__ import annotations

import argparse
import sys

from realnode_runs import median, outcomes, run_tests, spread


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--standby-baseline", action="store_true")
    args = parser.parse_args()
    env = {
        "TORCHRUN_IN_PLACE_RESTART_RUNS": str(args.runs),
        "TORCHRUN_BENCH_STANDBY": "alternate" if args.standby_baseline else "",
    }
    out, seconds = run_tests("in_place_in_the_same_pods or recreate_path_recovers", env, "--durations=0")
    results = outcomes(out, "same_pods")
    in_place = seconds.get("InPlace", [])
    passed = sum(1 for v in results.values() if v == "PASSED")
    for run in range(args.runs):
        print(f"run {run + 1:2d}: {results.get(str(run), 'NOT RUN')}", flush=True)
    print(
        f"restarted in place and resumed from the newest checkpoint in {passed} of {args.runs} runs in a row"
    )
    if in_place:
        print(f"crash to the first step after the resume, in place: {spread(in_place)}")
    plain = seconds.get("InPlaceNoStandby", [])
    if plain and in_place:
        ratio = median(plain) / median(in_place)
        print(f"in place without the standby torchrun: {spread(plain)} ({ratio:.2f}x the median with it)")
    recreate = seconds.get("Recreate", [])
    if recreate and in_place:
        ratio = recreate[0] / median(in_place)
        print(
            f"recreate path, same crash, same session: {recreate[0]:.1f} s ({ratio:.1f}x the in-place median)"
        )
    if passed != args.runs or not recreate:
        print("\n".join(line for line in out.splitlines() if line.startswith("E   "))[:4000])
    return 0 if passed == args.runs and recreate else 1


if __name__ == "__main__":
    sys.exit(main())
