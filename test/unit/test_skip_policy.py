"""The skip policy (test/skip_policy.py): an unlisted skip fails the run, a listed one does not,
and every skip is printed with its reason. The end-to-end cases run a real pytest session on a
throwaway test file with the policy loaded, exactly as test/conftest.py loads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from skip_policy import ExpectedSkip, Skip, load, parse, unexpected

TEST_DIR = Path(__file__).resolve().parents[1]

SKIPPING = """
import pytest

def test_runs():
    assert True

def test_needs_a_tool():
    pytest.skip("the frobnicator is not installed")

@pytest.mark.xfail(reason="a known bug, not a skip")
def test_known_bug():
    assert False
"""


def run_session(tmp_path: Path, expected: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(SKIPPING)
    listing = tmp_path / "expected.txt"
    listing.write_text(expected)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TEST_DIR), os.environ.get("PYTHONPATH", "")]),
        "TORCHRUN_EXPECTED_SKIPS": str(listing),
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "skip_policy",
            "-q",
            "test_sample.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_unlisted_skip_fails_a_session_whose_tests_all_passed(tmp_path: Path) -> None:
    proc = run_session(tmp_path, "# nothing expected\n")
    assert "1 passed, 1 skipped, 1 xfailed" in proc.stdout, proc.stdout
    assert proc.returncode == 1, proc.stdout
    assert "UNEXPECTED: test_sample.py::test_needs_a_tool: the frobnicator is not installed" in proc.stdout
    assert "test_known_bug" not in proc.stdout.split("skips")[-1]  # an xfail is not a skip


def test_a_listed_skip_passes_and_is_still_printed_with_why(tmp_path: Path) -> None:
    line = "test_sample.py::test_needs_*  |  frobnicator is not installed  |  CI has no frobnicator\n"
    proc = run_session(tmp_path, line)
    assert proc.returncode == 0, proc.stdout
    assert (
        "expected (CI has no frobnicator): test_sample.py::test_needs_a_tool: "
        "the frobnicator is not installed" in proc.stdout
    )


def test_a_listed_test_skipped_for_another_reason_is_unexpected(tmp_path: Path) -> None:
    proc = run_session(
        tmp_path, "test_sample.py::test_needs_a_tool | the gizmo is missing | CI has no gizmo\n"
    )
    assert proc.returncode == 1, proc.stdout
    assert "UNEXPECTED" in proc.stdout


def test_matching_needs_the_node_id_and_the_reason() -> None:
    expected = [ExpectedSkip("test/a.py::*", "no go", "why")]
    skips = [
        Skip("test/a.py::t1", "no go toolchain"),
        Skip("test/a.py::t2", "other"),
        Skip("test/b.py::t", "no go"),
    ]
    assert unexpected(skips, expected) == skips[1:]


def test_a_malformed_line_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="list:2"):
        parse("# fine\ntest/a.py::t | reason without why\n", "list")
    with pytest.raises(ValueError, match="list:1"):
        parse("test/a.py::t | reason |   \n", "list")


def test_the_repositorys_list_parses() -> None:
    for entry in load(TEST_DIR / "expected_skips.txt"):
        assert entry.why
