"""No silent skips: a skipped test proves nothing, so a run fails on any skip not listed as
expected, and every skip is printed with its reason. An xfail is a skip by another name (the
test ran, failed, and the run stayed green), and so is an xpass (a test marked as failing that
passed, its mark no longer true): both are held to the same list.

The expected skips (xfails, xpasses) live in one file, `test/expected_skips.txt` (another with
the environment variable `TORCHRUN_EXPECTED_SKIPS`), one per line:

    <test node id, fnmatch wildcards allowed> | <text the skip reason contains> | <why it is expected>

A skip matches a line when its node id matches the pattern and its reason (an xfail's: the
mark's or `pytest.xfail`'s reason) contains the text;
the third field is for the reader and must not be empty. test/conftest.py registers the policy;
`-p skip_policy` loads it into any pytest run (the policy's own unit test does that).
At the end of the session a "skips" section lists every skip, expected or not, and an
unexpected one turns a passing session into a failing one (exit code 1).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

DEFAULT_LIST = Path(__file__).resolve().parent / "expected_skips.txt"
PLUGIN_NAME = "torchrun-skip-policy"


@dataclass(frozen=True)
class ExpectedSkip:
    pattern: str
    reason: str
    why: str

    def matches(self, skip: Skip) -> bool:
        return fnmatch.fnmatchcase(skip.nodeid, self.pattern) and self.reason in skip.reason


@dataclass(frozen=True)
class Skip:
    nodeid: str
    reason: str
    kind: str = "skipped"  # or "xfailed", "xpassed"


def parse(text: str, source: str = "expected skips") -> list[ExpectedSkip]:
    """The list's lines; blank lines and `#` comments are ignored, a malformed line is an error."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 3 or not all(fields):
            raise ValueError(f"{source}:{number}: want '<node id pattern> | <reason text> | <why>': {line!r}")
        out.append(ExpectedSkip(*fields))
    return out


def load(path: Path | None = None) -> list[ExpectedSkip]:
    path = path or Path(os.environ.get("TORCHRUN_EXPECTED_SKIPS") or DEFAULT_LIST)
    return parse(path.read_text(), str(path))


def unexpected(skips: Iterable[Skip], expected: Iterable[ExpectedSkip]) -> list[Skip]:
    allowed = list(expected)
    return [s for s in skips if not any(e.matches(s) for e in allowed)]


def reason_of(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


class SkipPolicy:
    """The pytest plugin: records skips, reports them, fails the session on an unexpected one."""

    def __init__(self, expected: list[ExpectedSkip]) -> None:
        self.expected = expected
        self.skips: list[Skip] = []

    def _record(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        xfail = getattr(report, "wasxfail", None)  # pytest reports an xfail as a skip, an xpass as a pass
        if xfail is not None and (report.skipped or report.passed):
            kind = "xfailed" if report.skipped else "xpassed"
            self.skips.append(Skip(report.nodeid, xfail.removeprefix("reason: "), kind))
        elif report.skipped:
            self.skips.append(Skip(report.nodeid, reason_of(report)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._record(report)

    def unexpected(self) -> list[Skip]:
        return unexpected(self.skips, self.expected)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.skips:
            return
        bad = self.unexpected()
        terminalreporter.section("skips")
        for skip in self.skips:
            why = next((e.why for e in self.expected if e.matches(skip)), None)
            verdict = f"expected ({why})" if why else "UNEXPECTED"
            kind = "" if skip.kind == "skipped" else f" ({skip.kind})"
            terminalreporter.line(f"{verdict}: {skip.nodeid}{kind}: {skip.reason}", red=not why)
        if bad:
            terminalreporter.line(
                f"{len(bad)} unexpected skip(s) or xfail(s): the session fails; fix the cause or list"
                " it, with why it is expected, in test/expected_skips.txt",
                red=True,
                bold=True,
            )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.unexpected() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def register(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(SkipPolicy(load()), PLUGIN_NAME)


def pytest_configure(config: pytest.Config) -> None:
    """When loaded with `-p skip_policy`."""
    register(config)
