"""Information a test wants in the run's summary: neither a failure nor output hidden by capture.

Two kinds, both through pytest's own `record_property` fixture, printed at the end of the session
under the test's node id (test/conftest.py registers this; `-p summary_notes` loads it into any
pytest run, as its unit test does):

- `record_property("note", text)`: a "notes" section, for what a reader of the run should know.
- `record_property("stand_in", "<name>[: <detail>]")`: a "stand-ins" section, printed in yellow
  and bold, for a test that ran against something standing in for the real thing: what passed
  there proves less than its name says, and the run says so whatever the outcome. `<name>` is the
  real thing, one of `STAND_INS`, whose entry says what stands in for it and why; `<detail>` is
  what this run found (e.g. which CRDs the API server served). A test that always runs against
  a stand-in says so with the marker `@pytest.mark.stand_in("<name>")` instead (on the test, its
  class or its module), which records the same property when the test is set up.

Each stand-in is printed once, with every test that used it: passed, failed or errored alike (a
skipped test ran against nothing). A property whose name is not in `STAND_INS` is printed as it
is, under its own heading.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

NOTE = "note"
STAND_IN = "stand_in"
PLUGIN_NAME = "torchrun-summary-notes"


@dataclass(frozen=True)
class StandIn:
    """What a test runs against in place of `name` (the real thing), and why."""

    name: str
    instead: str  # what stands in for it, where it lives, and what it does not do


KAI_CRDS = "KAI-Scheduler's CRDs"
KAI_SCHEDULER = "KAI-Scheduler"
KUEUE = "Kueue"
KUBELET = "a kubelet and a storage driver"
AMAZON_S3 = "Amazon S3"
CHECKPOINT_S3 = "Amazon S3 as the checkpoints' mirror"
TORCH_PARSER = "torch 2.15's torchrun"
IMAGE_BASE = "python:3.11-slim"
SUPERVISOR_LINK = "the in-place supervisors and their sidecars' link"

STAND_INS = {
    s.name: s
    for s in (
        StandIn(
            KAI_CRDS,
            "hack/testbed/kai-crds-standin.yaml, typed from the fields the controller writes (served "
            "only when the Go module proxy does not serve KAI's module; the tests read its marker "
            "annotation off the served CRDs before they report it)",
        ),
        StandIn(
            KAI_SCHEDULER,
            "the test bed's kube-scheduler with one profile named kai-scheduler "
            "(test/integration/test_seeds.py): it places pods one by one, no gang scheduling",
        ),
        StandIn(
            KUEUE,
            "the test making Kueue's moves itself through the API (it creates the Workload, injects "
            "a flavor's nodeSelector, unsuspends the Job); no Kueue runs "
            "(test/integration/test_schedulers.py::TestRealKueue runs the real one)",
        ),
        StandIn(
            KUBELET,
            "the test bed's node agent on kwok's nodes (hack/testbed/nodeagent): sync pods run as "
            "local processes, worker logs are files it writes, volumes are hostPath directories; "
            "no containers, images, isolation, limits or restarts",
        ),
        StandIn(
            AMAZON_S3,
            "moto's S3 server (`python -m moto.server`, the moto[server] test extra) on loopback, "
            "with its IAM authentication switched on",
        ),
        StandIn(
            CHECKPOINT_S3,
            "moto's S3 server (`python -m moto.server`) without authentication (any key is "
            "accepted): on loopback for test/integration/test_checkpoint_s3.py, on every address "
            "of this host for the real node's pods in test/e2e/test_realnode.py",
        ),
        StandIn(
            TORCH_PARSER,
            "its torch/distributed/run.py and argparse_util.py from the macOS arm64 wheel "
            "(hack/testbed/torchrun-versions.sh), the torch modules they import stubbed: the "
            "argument parser runs, nothing is launched",
        ),
        StandIn(
            SUPERVISOR_LINK,
            'the test POSTing what the reporter sidecar\'s link sends (`{"job", "inPlace"}`, '
            "with a pod-bound token the API server minted) for kwok's pods, which run no process "
            "(test/integration/test_inplace_restarts.py); the real supervisor and sidecar run on the real "
            "node (test/e2e/test_realnode.py)",
        ),
        StandIn(
            IMAGE_BASE,
            "a Debian bookworm base made here by mmdebstrap (hack/testbed/build-image.sh; no "
            "registry serves python:3.11-slim): Debian's Python 3.11.2, not python.org's",
        ),
    )
}


def stand_in(name: str, detail: str = "") -> str:
    """The `stand_in` property's value: the real thing's name (one of `STAND_INS`), then what this
    run found, if anything."""
    if name not in STAND_INS:
        raise ValueError(f"unknown stand-in {name!r}: one of {sorted(STAND_INS)}")
    return f"{name}: {detail}" if detail else name


def parse(value: str) -> tuple[str, str]:
    """(heading, detail) of a `stand_in` value: a known name and its detail, or the whole text."""
    name, _, detail = value.partition(": ")
    return (name, detail) if name in STAND_INS else (value, "")


def heading(name: str) -> str:
    known = STAND_INS.get(name)
    return f"{known.name}, played by {known.instead}" if known else name


class SummaryNotes:
    """The plugin: collects the properties from every report, prints them at the end."""

    def __init__(self) -> None:
        # (node id, value) in order, without the repeats of setup/call/teardown
        self.notes: dict[tuple[str, str], None] = {}
        self.stand_ins: dict[tuple[str, str], None] = {}
        self.skipped: set[str] = set()  # a test skipped in setup or call ran against nothing

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            for mark in item.iter_markers("stand_in"):
                try:
                    stand_in(*mark.args)
                except (TypeError, ValueError) as exc:  # a misspelt name would list nothing
                    raise pytest.UsageError(f"{item.nodeid}: {mark}: {exc}") from exc

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        for mark in item.iter_markers("stand_in"):
            item.user_properties.append((STAND_IN, stand_in(*mark.args)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped:
            self.skipped.add(report.nodeid)
            return
        for key, value in report.user_properties:
            found = {NOTE: self.notes, STAND_IN: self.stand_ins}.get(key)
            if found is not None:
                found[(report.nodeid, str(value))] = None

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.notes:
            terminalreporter.section("notes")
            for nodeid, text in self.notes:
                terminalreporter.line(f"{nodeid}:")
                for line in text.splitlines():
                    terminalreporter.line(f"    {line}")
        grouped: dict[str, tuple[dict[str, None], dict[str, None]]] = {}
        for nodeid, value in self.stand_ins:
            if nodeid in self.skipped:
                continue
            name, detail = parse(value)
            details, nodeids = grouped.setdefault(name, ({}, {}))
            details.update({detail: None} if detail else {})
            nodeids[nodeid] = None
        if grouped:
            terminalreporter.section("stand-ins", yellow=True, bold=True)
        for name, (details, nodeids) in grouped.items():
            line = f"STAND-IN: {len(nodeids)} test(s) ran against {heading(name)}"
            terminalreporter.line(line, yellow=True, bold=True)
            for detail in details:
                terminalreporter.line(f"  this run: {detail}", yellow=True)
            for nodeid in nodeids:
                terminalreporter.line(f"    {nodeid}", yellow=True)


def register(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.addinivalue_line(
            "markers",
            "stand_in(name): the test runs against a stand-in for `name` (test/summary_notes.py "
            "STAND_INS), listed under it at the end of the run",
        )
        config.pluginmanager.register(SummaryNotes(), PLUGIN_NAME)


def pytest_configure(config: pytest.Config) -> None:
    """When loaded with `-p summary_notes`."""
    register(config)
