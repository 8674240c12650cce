"""`kubectl torchrun` flag mistakes: each is one line naming the flag and a non-zero exit, with
nothing on stdout and nothing read or sent; the full usage only with `--help`."""

from __future__ import annotations

import pytest

from controller.plugin.flags import flag_error_line
from controller.plugin.main import main

SUBMIT = ["submit", "--queue", "q"]


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parse that wrongly succeeded would reach the kubeconfig and fail differently."""
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert out == ""  # no usage
    assert err.endswith("\n") and err.count("\n") == 1, err  # one line
    return code, err.rstrip("\n")


@pytest.mark.parametrize(
    "argv, line",
    [
        # --nodes and --gpus: a whole number of at least 1
        ([*SUBMIT, "--nodes", "0", "x"], "error: --nodes: must be at least 1, not 0"),
        ([*SUBMIT, "--nodes", "-2", "x"], "error: --nodes: must be at least 1, not -2"),
        ([*SUBMIT, "--nodes", "two", "x"], "error: --nodes: must be a whole number, not 'two'"),
        ([*SUBMIT, "--gpus", "0", "x"], "error: --gpus: must be at least 1, not 0"),
        ([*SUBMIT, "--gpus", "1.5", "x"], "error: --gpus: must be a whole number, not '1.5'"),
        ([*SUBMIT, "--nodes"], "error: --nodes: expected one argument"),
        # --rank: a whole number of at least 0
        (["logs", "job", "--rank", "-1"], "error: --rank: must be at least 0, not -1"),
        (["logs", "job", "--rank", "last"], "error: --rank: must be a whole number, not 'last'"),
        (["logs", "job", "--rank"], "error: --rank: expected one argument"),
        # the connection flags take a value, before or after the command
        (["-n"], "error: --namespace: expected one argument"),
        (["list", "--context"], "error: --context: expected one argument"),
        (["status", "job", "--kubeconfig"], "error: --kubeconfig: expected one argument"),
        # flags that exclude or need each other
        ([*SUBMIT, "--nodes", "1", "--gpus", "8", "x"], "error: --gpus: not allowed with --nodes"),
        (["logs", "job", "--rank", "1", "--all"], "error: --all: not allowed with --rank"),
        (["submit", "--nodes", "1", "x"], "error: --queue: required (kubectl torchrun submit --help)"),
        ([*SUBMIT, "x"], "error: --nodes or --gpus: one is required (kubectl torchrun submit --help)"),
        ([*SUBMIT, "--nodes", "1"], "error: command: required (kubectl torchrun submit --help)"),
        (["status"], "error: name: required (kubectl torchrun status --help)"),
        # unknown flags, commands and words
        (
            [*SUBMIT, "--nodes", "1", "--nodez", "2", "x"],
            "error: --nodez: unknown flag (kubectl torchrun submit --help lists the flags)",
        ),
        (
            ["list", "--bogus=1"],
            "error: --bogus: unknown flag (kubectl torchrun list --help lists the flags)",
        ),
        (["list", "--all-namespaces=yes"], "error: --all-namespaces: ignored explicit argument 'yes'"),
        (["status", "job", "-x"], "error: -x: unknown flag (kubectl torchrun status --help lists the flags)"),
        (["status", "job", "other"], "error: 'other': unexpected argument (kubectl torchrun status --help)"),
        (["sumbit"], "error: sumbit: unknown command (kubectl torchrun --help lists the commands)"),
        ([], "error: COMMAND: required (kubectl torchrun --help)"),
    ],
)
def test_a_flag_error_is_one_line_naming_the_flag(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(argv, capsys) == (2, line)


def test_an_ambiguous_abbreviation_names_the_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    code, line = run([*SUBMIT, "--n", "1", "x"], capsys)
    assert code == 2
    assert line.startswith("error: --n: ambiguous, could be ")
    assert {"--nodes", "--name", "--namespace"} <= set(line.split("could be ")[1].split(", "))


def test_a_bad_env_value_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    line = "error: --env 'NOVALUE': want NAME=value with NAME a variable name"
    assert run([*SUBMIT, "--nodes", "1", "--env", "NOVALUE", "--dry-run", "x"], capsys) == (1, line)


@pytest.mark.parametrize("argv", [["--help"], ["submit", "--help"], ["logs", "-h"]])
def test_the_usage_is_printed_only_for_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: kubectl torchrun") and err == ""


def test_an_unknown_argparse_message_is_kept_whole() -> None:
    assert flag_error_line("something new", "kubectl torchrun") == "something new"
