"""Information a test wants in the run's summary: neither a failure nor output hidden by capture.

Two kinds, both through pytest's own `record_property` fixture, printed at the end of the session
under the test's node id (test/conftest.py registers this):

- `record_property("note", text)`: a "notes" section, for what a reader of the run should know.
- `record_property("stand_in", text)`: a "stand-ins" section, printed in yellow and bold, for a
  test that ran against something standing in for the real thing (e.g. KAI-Scheduler's CRDs when
  its module cannot be fetched): what passed there proves less than its name says, and the run
  says so whatever the outcome. `text` names the stand-in and why the real thing was not used.
"""

from __future__ import annotations

import pytest

NOTE = "note"
STAND_IN = "stand_in"
PLUGIN_NAME = "torchrun-summary-notes"


def collect(terminalreporter: pytest.TerminalReporter, key: str) -> dict[tuple[str, str], None]:
    """(node id, text) of every property `key`, in order, without the repeats of setup/teardown."""
    found: dict[tuple[str, str], None] = {}
    for outcome in ("passed", "failed", "error"):
        for report in terminalreporter.getreports(outcome):
            for name, value in getattr(report, "user_properties", ()):
                if name == key:
                    found[(report.nodeid, str(value))] = None
    return found


class SummaryNotes:
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        notes = collect(terminalreporter, NOTE)
        if notes:
            terminalreporter.section("notes")
            for nodeid, text in notes:
                terminalreporter.line(f"{nodeid}:")
                for line in text.splitlines():
                    terminalreporter.line(f"    {line}")
        stand_ins: dict[str, list[str]] = {}
        for nodeid, text in collect(terminalreporter, STAND_IN):
            stand_ins.setdefault(text, []).append(nodeid)
        if stand_ins:
            terminalreporter.section("stand-ins", yellow=True, bold=True)
            for text, nodeids in stand_ins.items():
                line = f"STAND-IN: {len(nodeids)} test(s) ran against {text}"
                terminalreporter.line(line, yellow=True, bold=True)
                for nodeid in nodeids:
                    terminalreporter.line(f"    {nodeid}", yellow=True)


def register(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(SummaryNotes(), PLUGIN_NAME)
