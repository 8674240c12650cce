"""One real-node session of test/e2e/test_realnode.py for a bench: its output, the seconds its
tests wrote, and each parametrized run's outcome.

The benches that repeat a real-node test N times (`in_place_restart.py`, `hot_reload.py`) run
pytest once, in this repository, with `env` added; the tests write what they timed as JSON to
`TORCHRUN_BENCH_OUT`. Needs root (the real node).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TEST = "test/e2e/test_realnode.py"


def run_tests(selector: str, env: dict[str, str], *pytest_args: str) -> tuple[str, dict[str, Any]]:
    """pytest's output (stdout then stderr) and the JSON the tests wrote ({} when none) for the
    tests `-k selector` picks."""
    with tempfile.TemporaryDirectory() as tmp:
        seconds_file = Path(tmp) / "seconds.json"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *pytest_args, TEST,
             "-k", selector],
            cwd=REPO, env={**os.environ, **env, "TORCHRUN_BENCH_OUT": str(seconds_file)},
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        seconds = json.loads(seconds_file.read_text()) if seconds_file.exists() else {}
    return done.stdout + done.stderr, seconds


def outcomes(out: str, test_fragment: str) -> dict[str, str]:
    """Run index → PASSED or FAILED, for the parametrized test whose id contains `test_fragment`."""
    pattern = rf"^(PASSED|FAILED) \S+{re.escape(test_fragment)}\S*\[(\d+)\]"
    return {run: outcome for outcome, run in re.findall(pattern, out, re.MULTILINE)}


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def spread(values: list[float]) -> str:
    """`median M s, min A s, max B s over N runs`."""
    low, high = min(values), max(values)
    return f"median {median(values):.1f} s, min {low:.1f} s, max {high:.1f} s over {len(values)} runs"
