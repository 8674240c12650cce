"""The Kueue tests on another Kueue than the pinned one (default v0.14.0, which serves only
`kueue.x-k8s.io/v1beta1`): the controller reads Workloads in the newest version served, so it
must work unchanged on both. Not in CI (a second Kueue build costs minutes); run it when the
Kueue code or the pin changes.

    python hack/bench/kueue_compat.py [--version v0.14.0] [-- extra pytest args]

It builds that Kueue and fetches its CRDs (`TORCHRUN_KUEUE_VERSION`, which hack/testbed/lib.sh
and the tests read), then runs `test_schedulers.py`'s Kueue tests — the real Kueue's, the
contract's and the missing-scheduler check — on a control plane of their own, and exits with
pytest's code.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = "test/integration/test_schedulers.py"
SELECT = "Kueue or Missing"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="v0.14.0", help="the Kueue module version")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    env = {**os.environ, "TORCHRUN_KUEUE_VERSION": args.version}
    for script in ("build-kueue.sh", "scheduler-crds.sh"):
        subprocess.run(
            [str(REPO / "hack" / "testbed" / script)], env=env, check=True, stdout=subprocess.DEVNULL
        )
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", TESTS, "-k", SELECT]
    print(f"Kueue {args.version}: {' '.join(pytest[1:])}", flush=True)
    return subprocess.run([*pytest, *args.pytest_args], env=env, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
