"""The skip policy (test/skip_policy.py): an unlisted skip (or xfail, or xpass) fails the run, a
listed one does not, and every one is printed with its reason. The end-to-end cases run a real
pytest session on a throwaway test file with the policy loaded, exactly as test/conftest.py loads
it."""

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
"""

XFAILING = """
import pytest

def test_runs():
    assert True

@pytest.mark.xfail(reason="a known bug in the frobnicator")
def test_known_bug():
    assert False

def test_gives_up():
    pytest.xfail("the gizmo misbehaves")

@pytest.mark.xfail(reason="was broken once")
def test_fixed_since():
    assert True
"""


def run_session(tmp_path: Path, expected: str, sample: str = SKIPPING) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(sample)
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
    assert "1 passed, 1 skipped" in proc.stdout, proc.stdout
    assert proc.returncode == 1, proc.stdout
    assert "UNEXPECTED: test_sample.py::test_needs_a_tool: the frobnicator is not installed" in proc.stdout


def test_an_unlisted_xfail_or_xpass_fails_a_session_with_no_failure(tmp_path: Path) -> None:
    proc = run_session(tmp_path, "# nothing expected\n", XFAILING)
    assert "1 passed, 2 xfailed, 1 xpassed" in proc.stdout, proc.stdout
    assert proc.returncode == 1, proc.stdout
    skips = proc.stdout.split(" skips ")[-1]  # the section, not the summary line
    assert "UNEXPECTED: test_sample.py::test_known_bug (xfailed): a known bug in the frobnicator" in skips
    assert "UNEXPECTED: test_sample.py::test_gives_up (xfailed): the gizmo misbehaves" in skips
    assert "UNEXPECTED: test_sample.py::test_fixed_since (xpassed): was broken once" in skips
    assert "3 unexpected skip(s) or xfail(s)" in skips


def test_listed_xfails_and_xpasses_pass_and_are_still_printed(tmp_path: Path) -> None:
    listing = (
        "test_sample.py::test_known_bug | frobnicator | upstream bug 12\n"
        "test_sample.py::test_gives_up | gizmo | the gizmo is flaky\n"
        "test_sample.py::test_fixed_since | broken once | to be unmarked\n"
    )
    proc = run_session(tmp_path, listing, XFAILING)
    assert proc.returncode == 0, proc.stdout
    assert "expected (upstream bug 12): test_sample.py::test_known_bug (xfailed)" in proc.stdout
    assert "expected (to be unmarked): test_sample.py::test_fixed_since (xpassed)" in proc.stdout


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
