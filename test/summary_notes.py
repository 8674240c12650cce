"""Information a test wants in the run's summary: neither a failure nor output hidden by capture.

A test calls `record_property("note", text)` (pytest's own fixture); at the end of the session a
"notes" section prints every note under its test's node id. test/conftest.py registers this.
"""

from __future__ import annotations

import pytest

NOTE = "note"
PLUGIN_NAME = "torchrun-summary-notes"


class SummaryNotes:
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        notes: dict[tuple[str, str], None] = {}  # ordered, without the repeats of setup/teardown
        for outcome in ("passed", "failed", "error"):
            for report in terminalreporter.getreports(outcome):
                for key, value in getattr(report, "user_properties", ()):
                    if key == NOTE:
                        notes[(report.nodeid, str(value))] = None
        if not notes:
            return
        terminalreporter.section("notes")
        for nodeid, text in notes:
            terminalreporter.line(f"{nodeid}:")
            for line in text.splitlines():
                terminalreporter.line(f"    {line}")


def register(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(SummaryNotes(), PLUGIN_NAME)
