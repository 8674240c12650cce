"""How reliable torchrun's own in-place restart is on the real node ([recovery] asks before it
picks a mechanism): the real node's in-place test, N times in a row in one real node session.

    sudo python hack/bench/torchrun_inplace.py [--runs 10] [--max-restarts 3]

Each run is `test_torchrun_s_in_place_restart_...` of test/e2e/test_realnode.py (two worker pods,
Debian trixie's torch 2.6, c10d rendezvous, one gloo rank each, `distributed.maxRestarts` from
--max-restarts, the test's default 3;
rank 1 exits 1 after step 9; it passes when torchrun restarted both nodes' workers in place — the
same pods, no whole-job restart — and both resumed from step-8 and finished). Prints each run's
outcome and time and the tally; a failed run's first assertion line says how it failed. Needs root
(the real node). Not part of CI: the test exists only when this asks for it (its comment says why).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST = "test/e2e/test_realnode.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--max-restarts", type=int, default=3)
    args = parser.parse_args()
    env = {
        **os.environ,
        "TORCHRUN_IN_PLACE_RUNS": str(args.runs),
        "TORCHRUN_IN_PLACE_MAX_RESTARTS": str(args.max_restarts),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "--durations=0",
         TEST, "-k", "in_place_restart"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    times = {m[2]: float(m[1]) for m in re.finditer(r"^([0-9.]+)s call .*\[(\d+)\]$", out, re.MULTILINE)}
    results = {
        run: outcome for outcome, run in re.findall(r"^(PASSED|FAILED) \S+\[(\d+)\]", out, re.MULTILINE)
    }
    for run in range(args.runs):
        key = str(run)
        outcome = results.get(key, "NOT RUN")
        print(f"run {run + 1:2d}: {outcome:7s} {times.get(key, float('nan')):6.1f} s", flush=True)
    passed = sum(1 for v in results.values() if v == "PASSED")
    print(f"in-place restart resumed from the newest checkpoint in {passed} of {args.runs} runs")
    if passed != args.runs:
        print("\n".join(line for line in out.splitlines() if line.startswith("E   "))[:4000])
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
