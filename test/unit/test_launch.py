"""The launch builder: what users type → what torchrun runs (table-driven).

Every launcher flag is spelled with underscores, the only spelling torchrun knew before 2.0
(test/integration/test_torchrun_compat.py feeds the result to two real torchruns)."""

from __future__ import annotations

import pytest

from controller.torchrunjob.manifests.launch import (
    LaunchError,
    ParsedCommand,
    Rendezvous,
    nnodes_arg,
    parse_command,
    torchrun_args,
)

RDZV = Rendezvous("c10d", "job-0.job:29400", "uid-1")
HEAD = [
    "--nnodes=2",
    "--nproc_per_node=8",
    "--node_rank=$(PET_NODE_RANK)",
    "--rdzv_backend=c10d",
    "--rdzv_endpoint=job-0.job:29400",
    "--rdzv_id=uid-1",
    "--max_restarts=0",
]

CASES: list[tuple[str, list[str], dict[str, str]]] = [
    ("python train.py --epochs 100", ["train.py", "--epochs", "100"], {}),
    ("python3 train.py", ["train.py"], {}),
    ("python3.11 train.py", ["train.py"], {}),
    ("/opt/conda/bin/python train.py --lr 1e-3", ["train.py", "--lr", "1e-3"], {}),
    ("python -m pkg.train --lr 0.1", ["-m", "pkg.train", "--lr", "0.1"], {}),
    ("python -mpkg.train", ["-m", "pkg.train"], {}),
    ("python -u train.py", ["train.py"], {"PYTHONUNBUFFERED": "1"}),
    ("python -u -m pkg.train", ["-m", "pkg.train"], {"PYTHONUNBUFFERED": "1"}),
    ("python -W ignore train.py", ["train.py"], {"PYTHONWARNINGS": "ignore"}),
    ("python -O train.py", ["train.py"], {"PYTHONOPTIMIZE": "1"}),
    ("train.py --x 1", ["train.py", "--x", "1"], {}),
    ("bash run.sh --fast", ["--no_python", "bash", "run.sh", "--fast"], {}),
    ("./run.sh", ["--no_python", "./run.sh"], {}),
    ("uv run train.py", ["--no_python", "uv", "run", "train.py"], {}),
    ("WANDB_MODE=offline python train.py", ["train.py"], {"WANDB_MODE": "offline"}),
    ("A=1 B='x y' bash go.sh", ["--no_python", "bash", "go.sh"], {"A": "1", "B": "x y"}),
    ("python train.py --name 'my run' --tags \"a b\"", ["train.py", "--name", "my run", "--tags", "a b"], {}),
    ("python train.py --msg 'it''s'", ["train.py", "--msg", "its"], {}),
    ("python train.py --pattern '$(HOME)'", ["train.py", "--pattern", "$$(HOME)"], {}),
    (
        "pip install -e . && python train.py",
        ["--no_python", "bash", "-c", "pip install -e . && python train.py"],
        {},
    ),
    ("python train.py | tee log.txt", ["--no_python", "bash", "-c", "python train.py | tee log.txt"], {}),
    ("python train.py --data=/data/x.json", ["train.py", "--data=/data/x.json"], {}),
]


@pytest.mark.parametrize(("command", "tail", "env"), CASES)
def test_command_shapes(command: str, tail: list[str], env: dict[str, str]) -> None:
    parsed = parse_command(command)
    assert torchrun_args(parsed, nnodes="2", nproc_per_node=8, rendezvous=RDZV) == HEAD + tail
    assert parsed.env == env


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("python -c 'print(1)'", "python -c"),
        ("python", "no script"),
        ("python -u", "no script"),
        ("python -m", "module name"),
        ("torchrun --nproc-per-node 8 train.py", "launches torchrun itself"),
        ("python -m torch.distributed.run train.py", "launches torchrun itself"),
        ("python 'unterminated", "cannot parse"),
        ("FOO=1", "no program"),
        ("python -X importtime train.py", "-X importtime"),
        ("python -I train.py", "`-I`"),
    ],
)
def test_bad_commands_say_why(command: str, needle: str) -> None:
    with pytest.raises(LaunchError) as err:
        parse_command(command)
    assert needle in str(err.value)
    assert str(err.value).startswith("spec.command:")


def test_elastic_and_restarts_and_etcd() -> None:
    parsed = parse_command("python train.py")
    assert nnodes_arg(2, 1, 4) == "1:4"
    assert nnodes_arg(2, 2, 2) == "2"
    assert nnodes_arg(3) == "3"
    args = torchrun_args(
        parsed,
        nnodes="1:4",
        nproc_per_node=4,
        rendezvous=Rendezvous("etcd-v2", "job-etcd:2379", "uid-9"),
        max_restarts=3,
    )
    assert "--nnodes=1:4" in args and "--nproc_per_node=4" in args
    assert "--rdzv_backend=etcd-v2" in args and "--rdzv_endpoint=job-etcd:2379" in args
    assert "--max_restarts=3" in args and args[-1] == "train.py"


def test_no_flag_uses_a_spelling_older_torchrun_rejects() -> None:
    """torchrun before 2.0 has only underscore spellings; `-m` is the one short flag."""
    parsed = ParsedCommand(["run.sh"], no_python=True)
    args = torchrun_args(parsed, nnodes="2", nproc_per_node=8, rendezvous=RDZV, max_restarts=1)
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    assert flags and all("-" not in f[2:] for f in flags), flags


def test_parsed_command_defaults() -> None:
    assert parse_command("python train.py") == ParsedCommand(["train.py"])
