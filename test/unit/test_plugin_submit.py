"""`kubectl torchrun submit`'s job: each flag sets its spec field, `-f FILE` gives the rest, and
every mistake is one line naming the flag (or the file), with nothing read from the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.plugin.main import main
from controller.plugin.manifest import SubmitSpec
from controller.plugin.submit import SpecFlags, job_to_submit, submit_spec


@pytest.fixture(autouse=True)
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory as the current one; no cluster (a parse that wrongly succeeded would
    reach the kubeconfig and fail differently)."""
    root = tmp_path / "my-project"
    root.mkdir()
    (root / "train.py").write_text("print('training')\n")
    monkeypatch.chdir(root)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    return root


def dry_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The manifest `submit --dry-run` prints."""
    assert main(["submit", *argv, "--dry-run"]) == 0, capsys.readouterr().err
    manifest: dict[str, Any] = yaml.safe_load(capsys.readouterr().out.split("\n---\n")[0])
    return manifest


def one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert out == "" and err.endswith("\n") and err.count("\n") == 1, err
    return code, err.rstrip("\n")


def test_lifecycle_flags_produce_their_spec_fields(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--queue", "q", "--max-restarts", "2", "--min-nodes", "1", "--max-nodes", "3", "--deadline", "1h"]
    spec = dry_run([*argv, "python train.py"], capsys)["spec"]
    assert spec["failurePolicy"] == {"maxRestarts": 2}
    assert spec["elastic"] == {"minNodes": 1, "maxNodes": 3}
    assert spec["activeDeadlineSeconds"] == 3600
    assert spec["numNodes"] == 1  # no --nodes: an elastic job starts at its fewest nodes
    assert "ttlSecondsAfterFinished" not in spec and "suspend" not in spec

    in_place = ["--queue", "q", "--nodes", "2", "--max-restarts", "3", "--restart-in-place", "x"]
    spec = dry_run(in_place, capsys)["spec"]
    assert spec["failurePolicy"] == {"maxRestarts": 3, "restartMode": "InPlace"}

    spec = dry_run(["--queue", "q", "--nodes", "2", "--ttl", "90m", "--suspend", "x"], capsys)["spec"]
    assert (spec["ttlSecondsAfterFinished"], spec["suspend"], spec["numNodes"]) == (5400, True, 2)
    assert "elastic" not in spec and "failurePolicy" not in spec and "activeDeadlineSeconds" not in spec


@pytest.mark.parametrize(
    "text, seconds",
    [("1h", 3600), ("90m", 5400), ("3600s", 3600), ("1h30m", 5400), ("2d", 172800), ("45", 45)],
)
def test_deadline_takes_a_duration(text: str, seconds: int, capsys: pytest.CaptureFixture[str]) -> None:
    spec = dry_run(["--queue", "q", "--nodes", "1", "--deadline", text, "x"], capsys)["spec"]
    assert spec["activeDeadlineSeconds"] == seconds


SUBMIT = ["submit", "--queue", "q", "--nodes", "1"]


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            [*SUBMIT, "--deadline", "soon", "x"],
            "error: --deadline: must be a duration like 90m, 1h or 3600s, not 'soon'",
        ),
        (
            [*SUBMIT, "--deadline", "1w", "x"],
            "error: --deadline: must be a duration like 90m, 1h or 3600s, not '1w'",
        ),
        ([*SUBMIT, "--deadline", "0s", "x"], "error: --deadline: must be at least 1s, not 0s"),
        (
            [*SUBMIT, "--deadline", "-5", "x"],
            "error: --deadline: must be a duration like 90m, 1h or 3600s, not '-5'",
        ),
        (
            [*SUBMIT, "--ttl", "1.5h", "x"],
            "error: --ttl: must be a duration like 90m, 1h or 3600s, not '1.5h'",
        ),
        ([*SUBMIT, "--max-restarts", "-1", "x"], "error: --max-restarts: must be at least 0, not -1"),
        (
            [*SUBMIT, "--max-restarts", "many", "x"],
            "error: --max-restarts: must be a whole number, not 'many'",
        ),
        (
            [*SUBMIT, "--min-nodes", "0", "--max-nodes", "2", "x"],
            "error: --min-nodes: must be at least 1, not 0",
        ),
        ([*SUBMIT, "--max-nodes", "x3", "x"], "error: --max-nodes: must be a whole number, not 'x3'"),
        ([*SUBMIT, "--suspend=yes", "x"], "error: --suspend: ignored explicit argument 'yes'"),
        # an elastic range needs both ends (spec.elastic takes both)
        (
            [*SUBMIT, "--min-nodes", "2", "x"],
            "error: --max-nodes: required with --min-nodes (spec.elastic takes both)",
        ),
        (
            [*SUBMIT, "--max-nodes", "2", "x"],
            "error: --min-nodes: required with --max-nodes (spec.elastic takes both)",
        ),
        # -f: a file that cannot be a TorchrunJob
        ([*SUBMIT, "-f", "nope.yaml", "x"], "error: -f nope.yaml: No such file or directory"),
        (
            ["submit", "-f", "job.yaml"],
            "error: --queue: required (kubectl torchrun submit --help), or spec.jobQueue in -f job.yaml",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag(
    argv: list[str], line: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "job.yaml").write_text("spec: {command: python train.py}\n")
    code, printed = one_line([*argv, "--dry-run"] if "--dry-run" not in argv else argv, capsys)
    assert printed == line
    assert code in (1, 2)


JOB_FILE = {
    "apiVersion": "torchrun.ai/v1alpha1",
    "kind": "TorchrunJob",
    "metadata": {
        "name": "from-file",
        "labels": {"team": "vision"},
        "uid": "0000",
        "resourceVersion": "42",
        "creationTimestamp": "2026-01-01T00:00:00Z",
    },
    "spec": {
        "jobQueue": "file-queue",
        "command": "python old.py",
        "numGPUs": 16,
        "distributed": {"maxRestarts": 3},
        "failurePolicy": {"maxRestarts": 5, "backoffLimitPerNode": 1},
        "ttlSecondsAfterFinished": 600,
        "workspace": {"source": "upload", "mountPath": "/code"},
        "overrides": {
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "file"}],
            "image": "mine:1",
        },
    },
    "status": {"phase": "Succeeded"},
}


def test_submit_f_takes_the_file_and_the_flags_given_replace_its_fields(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "job.yaml").write_text(yaml.safe_dump(JOB_FILE))
    alone = dry_run(["-f", "job.yaml"], capsys)
    assert alone["metadata"] == {"name": "from-file", "labels": {"team": "vision"}}  # server fields dropped
    assert alone["spec"] == JOB_FILE["spec"] and "status" not in alone

    argv = [
        "-f",
        "job.yaml",
        "--queue",
        "q",
        "--nodes",
        "2",
        "--name",
        "n",
        "--env",
        "B=flag",
        "--env",
        "C=3",
    ]
    argv += ["--max-restarts", "2", "--min-nodes", "1", "--max-nodes", "3", "--deadline", "1h"]
    job = dry_run([*argv, "python", "train.py"], capsys)
    assert job["metadata"] == {"name": "n", "labels": {"team": "vision"}}
    assert job["spec"] == {
        "jobQueue": "q",
        "command": "python train.py",
        "numNodes": 2,  # the flag's size replaces the file's numGPUs
        "distributed": {"maxRestarts": 3},
        "failurePolicy": {"maxRestarts": 2, "backoffLimitPerNode": 1},
        "ttlSecondsAfterFinished": 600,
        "workspace": {"source": "upload", "mountPath": "/code"},
        "overrides": {
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "flag"}, {"name": "C", "value": "3"}],
            "image": "mine:1",
        },
        "elastic": {"minNodes": 1, "maxNodes": 3},
        "activeDeadlineSeconds": 3600,
    }


def test_a_file_without_workspace_uploads_and_one_without_a_name_gets_the_directorys() -> None:
    base = {"spec": {"jobQueue": "q", "command": "c", "numNodes": 1}}
    spec = submit_spec(base, queue=None, command=None, source="-f job.yaml")
    assert spec == SubmitSpec(queue="q", command="c", nodes=1)
    job = job_to_submit(spec, SpecFlags(), "My Project", base)
    assert job["metadata"] == {"generateName": "my-project-"}
    assert job["spec"]["workspace"] == {"source": "upload"}
    kept = {**base, "metadata": {"generateName": "exp-"}}
    assert job_to_submit(spec, SpecFlags(), "d", kept)["metadata"] == {"generateName": "exp-"}


@pytest.mark.parametrize(
    "text, line",
    [
        ("a: [", "error: -f job.yaml: not YAML: "),
        ("kind: TorchrunQueue\n", "error: -f job.yaml: kind is 'TorchrunQueue', not TorchrunJob"),
        ("spec: {}\n---\nspec: {}\n", "error: -f job.yaml: want one TorchrunJob, found 2 documents"),
        (
            "spec: {workspace: {source: git, git: {url: https://x}}}\n",
            "error: -f job.yaml: workspace.source is git, and submit uploads this directory",
        ),
        (
            "spec: {volumes: {workspace: {source: upload}}}\n",
            "error: -f job.yaml: volumes.workspace is the seed's",
        ),
    ],
)
def test_a_file_that_cannot_be_submitted_is_one_line(
    text: str, line: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "job.yaml").write_text(text)
    code, printed = one_line(
        ["submit", "-f", "job.yaml", "--queue", "q", "--nodes", "1", "x", "--dry-run"], capsys
    )
    assert code == 1 and printed.startswith(line), printed


def test_the_files_namespace_is_the_target_unless_n_says_another(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "job.yaml").write_text(yaml.safe_dump({"metadata": {"namespace": "team-b"}}))
    argv = ["submit", "-f", "job.yaml", "--queue", "q", "--nodes", "1", "x", "--dry-run"]
    assert dry_run(argv[1:-1], capsys)["metadata"]["namespace"] == "team-b"
    assert one_line([*argv, "-n", "team-a"], capsys) == (
        2,
        "error: --namespace: team-a, but -f job.yaml says metadata.namespace: team-b",
    )
