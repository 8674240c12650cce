"""From the command a researcher types locally to a correct torchrun invocation (pure).

`parse_command` understands what people put in `spec.command`:
  python train.py --epochs 100      → torchrun … train.py --epochs 100
  python3 -u -m pkg.train --lr 1e-3 → torchrun … -m pkg.train --lr 1e-3  (-u → PYTHONUNBUFFERED)
  /opt/conda/bin/python train.py    → the interpreter is stripped whatever its path
  train.py                          → torchrun runs Python scripts by default
  bash run.sh, ./run.sh, uv run x   → torchrun --no_python …  (each process runs the program)
  WANDB_MODE=off python train.py    → leading NAME=value words become environment variables
  a && b, x | tee log               → torchrun --no_python bash -c '<the whole line>'
Quoting is preserved exactly: the result is an argv list, never re-joined through a shell.
Commands torchrun cannot run as asked (`python -c`, an interpreter with no script, a command
that already starts with torchrun) raise `LaunchError` with a message for the job's condition.

`torchrun_args` adds the launcher's own flags: `--nnodes` (N or MIN:MAX), `--nproc_per_node`,
`--node_rank` from the Indexed Job's completion index, the rendezvous (c10d at
`<job>-0.<job>:<port>` or etcd-v2), `--rdzv_id` (the job's UID) and `--max_restarts`.
Every flag is spelled with underscores: torchrun before 2.0 knows only those ("unrecognized
arguments: --nproc-per-node"), and 2.x accepts both, so the launch works from torch 1.10 to
current (test/integration/test_torchrun_compat.py runs it through two real torchruns).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ">", ">>", "<", "<<", "(", ")", "2>", "2>&1"})
# python options with an environment-variable equivalent, so the launcher can keep them
_FLAG_ENV = {
    "-u": ("PYTHONUNBUFFERED", "1"),
    "-B": ("PYTHONDONTWRITEBYTECODE", "1"),
    "-O": ("PYTHONOPTIMIZE", "1"),
    "-OO": ("PYTHONOPTIMIZE", "2"),
}
_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


class LaunchError(ValueError):
    """The command cannot be launched under torchrun; the message says why and what to do."""


@dataclass(frozen=True)
class ParsedCommand:
    """What torchrun should run: a script or module (Python) or any program (`no_python`)."""

    program: list[str]
    module: bool = False
    no_python: bool = False
    env: dict[str, str] = field(default_factory=dict)


def _has_shell_syntax(command: str) -> bool:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return any(tok in _SHELL_OPERATORS for tok in lexer)
    except ValueError as exc:
        raise LaunchError(f"spec.command: cannot parse the command: {exc}") from exc


def parse_command(command: str) -> ParsedCommand:
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise LaunchError(f"spec.command: cannot parse the command: {exc}") from exc
    if not words:
        raise LaunchError("spec.command: the command is empty")
    if _has_shell_syntax(command):
        return ParsedCommand(["bash", "-c", command], no_python=True)
    env: dict[str, str] = {}
    while words and _ENV_ASSIGN.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words:
        raise LaunchError("spec.command: only environment assignments, no program to run")
    head = os.path.basename(words[0])
    if head in _LAUNCHERS or (
        len(words) > 2 and _PYTHON.match(head) and words[1] == "-m" and words[2] in _LAUNCHERS
    ):
        raise LaunchError(
            "spec.command: the controller launches torchrun itself; give the command after it, "
            "for example `python train.py --epochs 10`"
        )
    if not _PYTHON.match(head):
        if words[0].endswith(".py"):
            return ParsedCommand(words, env=env)
        return ParsedCommand(words, no_python=True, env=env)
    return _parse_python(words[1:], env)


def _parse_python(args: list[str], env: dict[str, str]) -> ParsedCommand:
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m":
            if i + 1 >= len(args):
                raise LaunchError("spec.command: `python -m` needs a module name")
            return ParsedCommand(args[i + 1 :], module=True, env=env)
        if arg.startswith("-m") and len(arg) > 2:
            return ParsedCommand([arg[2:], *args[i + 1 :]], module=True, env=env)
        if arg == "-c" or arg.startswith("-c"):
            raise LaunchError("spec.command: torchrun cannot run `python -c`; put the code in a file")
        if arg in _FLAG_ENV:
            name, value = _FLAG_ENV[arg]
            env[name] = value
        elif arg in ("-W", "-X"):
            if i + 1 >= len(args):
                raise LaunchError(f"spec.command: `python {arg}` needs a value")
            if arg == "-W":
                env["PYTHONWARNINGS"] = args[i + 1]
            elif args[i + 1] == "dev":
                env["PYTHONDEVMODE"] = "1"
            else:
                raise LaunchError(
                    f"spec.command: `python -X {args[i + 1]}` cannot be passed through torchrun"
                )
            i += 1
        elif arg.startswith("-W") and len(arg) > 2:
            env["PYTHONWARNINGS"] = arg[2:]
        elif arg == "-":
            raise LaunchError("spec.command: torchrun cannot read a script from standard input")
        elif arg.startswith("-"):
            raise LaunchError(f"spec.command: the python option `{arg}` cannot be passed through torchrun")
        else:
            return ParsedCommand(args[i:], env=env)
        i += 1
    raise LaunchError("spec.command: python with no script or module to run")


@dataclass(frozen=True)
class Rendezvous:
    backend: str  # c10d | etcd-v2
    endpoint: str
    run_id: str


def nnodes_arg(num_nodes: int, min_nodes: int | None = None, max_nodes: int | None = None) -> str:
    if min_nodes is not None and max_nodes is not None and (min_nodes, max_nodes) != (num_nodes, num_nodes):
        return f"{min_nodes}:{max_nodes}"
    return str(num_nodes)


def torchrun_args(
    parsed: ParsedCommand,
    *,
    nnodes: str,
    nproc_per_node: int,
    rendezvous: Rendezvous,
    max_restarts: int = 0,
    node_rank_env: str = "PET_NODE_RANK",
) -> list[str]:
    """The arguments after `torchrun`. `$(PET_NODE_RANK)` is expanded by the kubelet from the
    container's environment (set from the pod's completion index)."""
    args = [
        f"--nnodes={nnodes}",
        f"--nproc_per_node={nproc_per_node}",
        f"--node_rank=$({node_rank_env})",
        f"--rdzv_backend={rendezvous.backend}",
        f"--rdzv_endpoint={rendezvous.endpoint}",
        f"--rdzv_id={rendezvous.run_id}",
        f"--max_restarts={max_restarts}",
    ]
    if parsed.no_python:
        args.append("--no_python")
    if parsed.module:
        args.append("-m")
    # `$(` in user arguments would be expanded by the kubelet; `$$(` is its escape
    return args + [w.replace("$(", "$$(") for w in parsed.program]
