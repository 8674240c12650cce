"""Hot reloads in place on the real node, N in a row, with and without the standby torchrun.

    sudo python hack/bench/hot_reload.py [--runs 6]

Runs `test_a_hot_reload_runs_the_new_code_...` of test/e2e/test_realnode.py N times in one real
node session (`restartMode: InPlace`, two worker pods, Debian trixie's torch 2.6, a one-line edit
and `kubectl torchrun sync`; it passes when every rank ran the new code in the same two pods), every
other run with `TORCHRUN_STANDBY=0` in the queue's env (each supervisor then starts the new
generation's torchrun afresh, importing torch). Prints each run's outcome, the time from the command
to the last rank's first step of the new code, and the medians of the two kinds with their ratio,
all measured in the same session. Needs root (the real node).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from realnode_runs import median, outcomes, run_tests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--output", type=Path, help="write pytest's whole output here (a slow run's logs)")
    args = parser.parse_args()
    env = {"TORCHRUN_HOT_RELOAD_RUNS": str(args.runs), "TORCHRUN_BENCH_STANDBY": "alternate"}
    out, seconds = run_tests("hot_reload_runs_the_new_code", env, "-s")
    results = outcomes(out, "same_pods")
    if args.output:
        args.output.write_text(out)
    for run in range(args.runs):
        kind = "without the standby" if run % 2 else "with the standby"
        print(f"run {run + 1:2d} ({kind}): {results.get(str(run), 'NOT RUN')}", flush=True)
    for line in re.findall(r"hot reload in place.*$", out, re.MULTILINE):  # after pytest's dots
        print(line)
    warm, plain = seconds.get("standby", []), seconds.get("no standby", [])
    print(f"with the standby: {', '.join(f'{v:.1f}' for v in warm)} s; without: "
          f"{', '.join(f'{v:.1f}' for v in plain)} s")  # fmt: skip
    if warm and plain:
        print(
            f"command to every rank stepping on the new code: median {median(warm):.1f} s with the "
            f"standby ({len(warm)} runs), {median(plain):.1f} s without ({len(plain)} runs): "
            f"{median(plain) / median(warm):.2f}x"
        )
    passed = sum(1 for v in results.values() if v == "PASSED")
    if passed != args.runs:
        print("\n".join(line for line in out.splitlines() if line.startswith("E   "))[:4000])
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
