"""The run's "stand-ins" summary (test/summary_notes.py): every stand-in a test ran against is
printed once, with what plays it and every test that used it — marked, recorded by a fixture at
set-up or at teardown (as `namespace` does for the node agent), passed or failed alike; a skipped
test is not listed, and a misspelt name fails the session instead of listing nothing. The sessions
run on throwaway test files with the plugin loaded as test/conftest.py loads it.

Also: what the stand-ins' descriptions name (files, tests) exists, and the test bed's log of what
its node agent served is read per namespace (`Cluster.served_by_node_agent`)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import summary_notes
from summary_notes import STAND_INS
from testbed import REPO, Cluster

TEST_DIR = Path(__file__).resolve().parents[1]
STAND_IN_YAML = REPO / "hack" / "testbed" / "kai-crds-standin.yaml"

SAMPLE = """
import pytest
from summary_notes import (
    AMAZON_S3, CHECKPOINT_S3, IMAGE_BASE, KAI_CRDS, KAI_SCHEDULER, KUBELET, KUEUE, STAND_IN, SUPERVISOR_LINK,
    TORCH_PARSER, stand_in,
)

@pytest.fixture
def kubelet_at_teardown(record_property):
    yield
    record_property(STAND_IN, stand_in(KUBELET))

@pytest.fixture
def kai_crds(record_property):
    record_property(STAND_IN, stand_in(KAI_CRDS, "the stand-in was served"))

def test_on_the_crds(kai_crds):
    pass

def test_with_free_text(record_property):
    record_property(STAND_IN, "KAI-Scheduler's CRDs: recorded as text")

def test_with_pods(kubelet_at_teardown):
    pass

@pytest.mark.stand_in(KUEUE)
class TestPlaysKueue:
    def test_admits(self):
        pass

    def test_fails(self):
        assert False

@pytest.mark.stand_in(KAI_SCHEDULER)
@pytest.mark.parametrize("n", [1, 2])
def test_scheduled(n, kubelet_at_teardown):
    pass

@pytest.mark.stand_in(AMAZON_S3)
def test_on_moto():
    pass

@pytest.mark.stand_in(AMAZON_S3)
def test_skipped():
    pytest.skip("no moto here")

@pytest.mark.stand_in(CHECKPOINT_S3)
def test_on_open_moto():
    pass

@pytest.mark.stand_in(TORCH_PARSER)
def test_parser():
    pass

@pytest.mark.stand_in(IMAGE_BASE)
def test_image():
    pass

@pytest.mark.stand_in(SUPERVISOR_LINK)
def test_link():
    pass

def test_on_nothing():
    pass
"""

EXPECTED = {
    summary_notes.KAI_CRDS: ["test_on_the_crds", "test_with_free_text"],
    summary_notes.KUBELET: ["test_with_pods", "test_scheduled[1]", "test_scheduled[2]"],
    summary_notes.KUEUE: ["TestPlaysKueue::test_admits", "TestPlaysKueue::test_fails"],
    summary_notes.KAI_SCHEDULER: ["test_scheduled[1]", "test_scheduled[2]"],
    summary_notes.AMAZON_S3: ["test_on_moto"],
    summary_notes.CHECKPOINT_S3: ["test_on_open_moto"],
    summary_notes.TORCH_PARSER: ["test_parser"],
    summary_notes.IMAGE_BASE: ["test_image"],
    summary_notes.SUPERVISOR_LINK: ["test_link"],
}


def run_session(tmp_path: Path, sample: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(sample)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TEST_DIR), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "summary_notes", "-q"]
    return subprocess.run(
        [*command, "test_sample.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def stand_ins_section(stdout: str) -> dict[str, tuple[list[str], list[str]]]:
    """The printed "stand-ins" section: for each heading line, its `this run:` details and the
    node ids under it."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ stand-ins =+", line))
    section: dict[str, tuple[list[str], list[str]]] = {}
    heading = ""
    for line in lines[start + 1 :]:
        if line.startswith("="):
            break
        if match := re.fullmatch(r"STAND-IN: (\d+) test\(s\) ran against (.*)", line):
            heading = match.group(2)
            section[heading] = ([], [])
            count = int(match.group(1))
        elif line.startswith("  this run: "):
            section[heading][0].append(line.removeprefix("  this run: "))
        else:
            section[heading][1].append(line.strip().removeprefix("test_sample.py::"))
            assert len(section[heading][1]) <= count, line
    return section


def test_the_summary_lists_each_stand_in_with_every_test_that_used_it(tmp_path: Path) -> None:
    proc = run_session(tmp_path, SAMPLE)
    assert "1 failed, 12 passed, 1 skipped" in proc.stdout, proc.stdout
    section = stand_ins_section(proc.stdout)
    assert {heading: tests for heading, (_, tests) in section.items()} == {
        summary_notes.heading(name): tests for name, tests in EXPECTED.items()
    }
    # every stand-in there is, each named with what plays it
    assert set(EXPECTED) == set(STAND_INS)
    for name, stand_in in STAND_INS.items():
        assert summary_notes.heading(name) == f"{name}, played by {stand_in.instead}"
    # what a run found about a stand-in is printed once under it, however many tests found it
    crds = section[summary_notes.heading(summary_notes.KAI_CRDS)][0]
    assert crds == ["the stand-in was served", "recorded as text"]
    assert section[summary_notes.heading(summary_notes.KUBELET)][0] == []


def test_a_misspelt_stand_in_fails_the_session_naming_it(tmp_path: Path) -> None:
    proc = run_session(tmp_path, 'import pytest\n\n@pytest.mark.stand_in("Kuebe")\ndef test_x():\n    pass\n')
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "unknown stand-in 'Kuebe'" in proc.stderr and "test_sample.py::test_x" in proc.stderr


def test_without_stand_ins_there_is_no_section(tmp_path: Path) -> None:
    proc = run_session(tmp_path, "def test_x():\n    pass\n")
    assert proc.returncode == 0 and "stand-ins" not in proc.stdout, proc.stdout


# -- what the descriptions name exists -----------------------------------------------------------

PATH = re.compile(r"\b((?:hack|test|controller|config|crd)/[\w./-]+\.(?:py|sh|yaml))(?:::(\w+))?")


def named(text: str) -> list[tuple[str, str]]:
    """(path, test or class name or "") of every repository file `text` names."""
    return [(m.group(1), m.group(2) or "") for m in PATH.finditer(text)]


def defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name for n in ast.walk(tree))


def test_every_file_and_test_the_stand_ins_name_exists() -> None:
    texts = [s.instead for s in STAND_INS.values()]
    texts.append("".join(line for line in STAND_IN_YAML.read_text().splitlines(True) if line.startswith("#")))
    references = [ref for text in texts for ref in named(text)]
    missing = [
        f"{path}::{name}" if name else path
        for path, name in references
        if not (REPO / path).exists() or (name and not defines(REPO / path, name))
    ]
    assert not missing, "the stand-ins' descriptions name what does not exist"
    assert ("test/integration/test_schedulers.py", "TestKaiCrdContract") in references


def test_a_test_that_no_longer_exists_is_found() -> None:
    (ref,) = named("shown by test/integration/test_schedulers.py::TestKaiStandIn")
    assert ref == ("test/integration/test_schedulers.py", "TestKaiStandIn")
    assert not defines(REPO / ref[0], ref[1])


# -- the node agent, per namespace ----------------------------------------------------------------

AGENT_LOG = """\
2026-01-01T00:00:00.000000Z [info     ] caches synced                  run_id=1 synced=True
2026-01-01T00:00:01.000000Z [info     ] provisioned                    claim=t-old/train-workspace path=/v
2026-01-01T00:00:02.000000Z [info     ] worker logs                    lines=1 pod=t-old/train-0-abc
"""
AFTER = """\
2026-01-01T00:00:03.000000Z [info     ] provisioned                    claim=t-mine/train-workspace path=/v
2026-01-01T00:00:04.000000Z [info     ] prepared                       argv=['python'] pod=t-mine/train-sync-0
2026-01-01T00:00:05.000000Z [info     ] worker logs                    lines=1 pod=t-mine/train-0-abc
2026-01-01T00:00:06.000000Z [info     ] worker logs                    lines=1 pod=t-minor/train-0-abc
2026-01-01T00:00:07.000000Z [info     ] reported                       exit_code=0 pod=t-mine/train-sync-0
"""


def test_the_node_agent_log_names_what_it_served_in_a_namespace(tmp_path: Path) -> None:
    cluster = Cluster(run_dir=tmp_path, kubeconfig=tmp_path / "kubeconfig", kubectl_path=tmp_path / "kubectl")
    assert cluster.node_agent_log_size() == 0 and cluster.served_by_node_agent("t-mine") == []
    cluster.node_agent_log.parent.mkdir()
    cluster.node_agent_log.write_text(AGENT_LOG)
    since = cluster.node_agent_log_size()
    assert cluster.served_by_node_agent("t-mine", since) == []
    with cluster.node_agent_log.open("a") as log:
        log.write(AFTER)
    assert cluster.served_by_node_agent("t-mine", since) == ["train-workspace", "train-sync-0", "train-0-abc"]
    assert cluster.served_by_node_agent("t-old", since) == []
    assert cluster.served_by_node_agent("t-old") == ["train-workspace", "train-0-abc"]
    # a log shorter than where the test started reading was replaced meanwhile: read from its start
    cluster.node_agent_log.write_text(AFTER.splitlines(True)[2])
    assert cluster.served_by_node_agent("t-mine", since) == ["train-0-abc"]
