"""`kubectl-torchrun`: the command line (kubectl finds it on PATH as `kubectl torchrun`).

`main(argv)` parses, runs one command and returns its exit code; it never lets a traceback
reach the user: a mistyped flag or a bad value is one `error: --flag: ...` line (exit 2; the
usage only with `--help`, see `flags`), a `PluginError` is printed as `error: <message>` with
its code, an error Status from the API server as `error: <its message>` (1), Ctrl-C is
`error: interrupted` (130), and any other exception (a bug) is one `error: internal error` line
(set `KUBECTL_TORCHRUN_DEBUG=1` to see the traceback). kubectl's connection flags
(`--kubeconfig`, `--context`, `-n/--namespace`) are accepted before or after the command name.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from controller.plugin import commands
from controller.plugin.checkpoints import checkpoints_command
from controller.plugin.console import Console
from controller.plugin.errors import PluginError, api_error_line
from controller.plugin.flags import EXIT_CODE, FlagError, Parser, at_least, parse
from controller.plugin.hotreload import sync
from controller.plugin.kube import Kube, load_target
from controller.plugin.manifest import command_text, parse_env
from controller.plugin.stack import stack_command
from controller.plugin.submit import SpecFlags, job_to_submit, read_manifest, submit, submit_spec
from controller.rest.errors import ApiError

PROG = "kubectl torchrun"
DEBUG_ENV = "KUBECTL_TORCHRUN_DEBUG"


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a flag given before the command is not reset by the subcommand's default
    parser.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="path to the kubeconfig file")
    parser.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context to use")
    parser.add_argument(
        "-n", "--namespace", default=argparse.SUPPRESS, help="namespace (default: the context's)"
    )


_DURATION = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def duration(minimum: int) -> Callable[[str], int]:
    """The type of a flag taking a duration (`90m`, `1h30m`, `3600s`, `2d`; a bare number is
    seconds) of at least `minimum` seconds; the value is in seconds."""

    def parse(text: str) -> int:
        if text.isdigit():
            seconds = int(text)
        elif (m := _DURATION.match(text)) and any(m.groups()):
            seconds = sum(int(v) * _UNIT_SECONDS[unit] for unit, v in m.groupdict().items() if v)
        else:
            raise argparse.ArgumentTypeError(f"must be a duration like 90m, 1h or 3600s, not {text!r}")
        if seconds < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}s, not {text}")
        return seconds

    return parse


def _add_submit(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    # --queue, the size and the command are required unless -f FILE has them (`submit_spec`)
    p = sub.add_parser("submit", parents=[common], help="run the current directory as a job")
    p.add_argument(
        "-f",
        "--filename",
        type=Path,
        metavar="FILE",
        help="a TorchrunJob manifest to submit with this directory; the flags given replace its fields",
    )
    p.add_argument("--queue", help="TorchrunQueue to run on (spec.jobQueue)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--nodes", type=at_least(1), help="nodes (pods) of the queue's shape (spec.numNodes)")
    size.add_argument(
        "--gpus", type=at_least(1), help="total GPUs: whole nodes, or part of one (spec.numGPUs)"
    )
    p.add_argument("--name", help="job name (default: the directory's name plus a random suffix)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="environment variable (spec.overrides.env; the queue must allow env)",
    )
    p.add_argument(
        "--max-restarts",
        type=at_least(0),
        metavar="N",
        help="whole-job restarts after a failure (spec.failurePolicy.maxRestarts; default 0)",
    )
    p.add_argument(
        "--restart-in-place",
        action="store_true",
        help="restart torchrun inside the pods after a failure, a stall or a hot reload instead of "
        "recreating them (spec.failurePolicy.restartMode: InPlace)",
    )
    p.add_argument(
        "--min-nodes", type=at_least(1), metavar="N", help="elastic: fewest nodes (spec.elastic.minNodes)"
    )
    p.add_argument(
        "--max-nodes",
        type=at_least(1),
        metavar="N",
        help="elastic: most nodes (spec.elastic.maxNodes); without --nodes the job starts at --min-nodes",
    )
    p.add_argument(
        "--deadline",
        type=duration(1),
        metavar="DURATION",
        help="fail the job this long after it started, e.g. 1h, 90m, 3600s (spec.activeDeadlineSeconds)",
    )
    p.add_argument(
        "--ttl",
        type=duration(0),
        metavar="DURATION",
        help="delete the job this long after it finished, e.g. 7d, 1h (spec.ttlSecondsAfterFinished)",
    )
    p.add_argument(
        "--suspend",
        action="store_true",
        help="create it suspended: upload, then wait for resume (spec.suspend)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the manifest and the file list; send nothing"
    )
    p.add_argument("--detach", action="store_true", help="return after the upload")
    p.add_argument(
        "--force", action="store_true", help="send secret-looking files and trees over the size limit"
    )
    p.add_argument("command", nargs="*", help='what you would run locally, e.g. "python train.py --epochs 3"')


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; see `kubectl torchrun --help`."""
    common = Parser(add_help=False)
    _connection_flags(common)
    parser = Parser(prog=PROG, parents=[common], description="Run torchrun jobs from your directory.")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    _add_submit(sub, common)
    p = sub.add_parser("list", parents=[common], help="jobs: queue, nodes, GPUs, phase, restarts, age")
    p.add_argument("-A", "--all-namespaces", action="store_true")
    sub.add_parser("status", parents=[common], help="phase, conditions, pods, events").add_argument("name")
    p = sub.add_parser("logs", parents=[common], help="worker logs (rank 0 by default)")
    p.add_argument("name")
    ranks = p.add_mutually_exclusive_group()
    ranks.add_argument("--rank", type=at_least(0), help="node rank to show (default 0)")
    ranks.add_argument("--all", action="store_true", help="every rank, lines prefixed [rank N]")
    when = p.add_mutually_exclusive_group()
    when.add_argument("-f", "--follow", action="store_true", help="stream until the job ends")
    when.add_argument(
        "-p",
        "--previous",
        action="store_true",
        help="the rank's previous pod (one that failed with a retriable exit code and was replaced)",
    )
    p = sub.add_parser("sync", parents=[common], help="hot reload: upload the directory as a new generation")
    p.add_argument("name")
    p.add_argument(
        "--force", action="store_true", help="send secret-looking files and trees over the size limit"
    )
    p.add_argument("--detach", action="store_true", help="return after the upload")
    p = sub.add_parser(
        "checkpoints", parents=[common], help="the job's checkpoints: step, time, size, complete"
    )
    p.add_argument("name")
    p = sub.add_parser("stack", parents=[common], help="py-spy dump of every rank's Python processes")
    p.add_argument("name")
    p.add_argument("--rank", type=at_least(0), help="only this node rank")
    for name, what in (
        ("suspend", "remove the pods, keep the job"),
        ("resume", "run a suspended job"),
        ("delete", "delete the job"),
    ):
        sub.add_parser(name, parents=[common], help=what).add_argument("name")
    return parser


def _connector(args: argparse.Namespace) -> Callable[[], Kube]:
    def connect() -> Kube:
        return Kube(
            load_target(
                getattr(args, "kubeconfig", None),
                getattr(args, "context", None),
                getattr(args, "namespace", None),
            )
        )

    return connect


def _submit(args: argparse.Namespace, console: Console, cwd: Path) -> int:
    base = read_manifest(args.filename) if args.filename else None
    spec = submit_spec(
        base, queue=args.queue, command=command_text(args.command) if args.command else None,
        nodes=args.nodes, gpus=args.gpus, name=args.name, env=parse_env(args.env),
        source=f"-f {args.filename}" if args.filename else "",
    )  # fmt: skip
    flags = SpecFlags(
        max_restarts=args.max_restarts, min_nodes=args.min_nodes, max_nodes=args.max_nodes,
        deadline=args.deadline, ttl=args.ttl, suspend=args.suspend, in_place=args.restart_in_place,
    )  # fmt: skip
    manifest = job_to_submit(spec, flags, cwd.resolve().name, base)
    namespace = manifest["metadata"].get("namespace")
    if namespace and getattr(args, "namespace", namespace) != namespace:
        raise PluginError(
            f"--namespace: {args.namespace}, but -f {args.filename} says metadata.namespace: {namespace}",
            EXIT_CODE,
        )
    if namespace:
        args.namespace = namespace  # like kubectl: the file's namespace, unless -n says otherwise
    return submit(
        manifest, cwd, _connector(args), console,
        dry_run=args.dry_run, detach=args.detach, force=args.force, env_flag=bool(args.env),
    )  # fmt: skip


def run(args: argparse.Namespace, console: Console, cwd: Path) -> int:
    """Run the parsed command; its exit code (errors raise `PluginError`)."""
    if args.cmd == "submit":
        return _submit(args, console, cwd)
    connect = _connector(args)
    kube = connect()
    if args.cmd == "list":
        return commands.list_command(kube, console, args.all_namespaces)
    if args.cmd == "status":
        return commands.status_command(kube, console, args.name)
    if args.cmd == "logs":
        return commands.logs_command(
            kube, console, args.name, args.rank, args.all, args.follow, args.previous
        )
    if args.cmd == "checkpoints":
        return checkpoints_command(kube, console, args.name)
    if args.cmd == "stack":
        return stack_command(kube, console, args.name, args.rank)
    if args.cmd == "sync":
        return sync(kube, args.name, cwd, console, force=args.force, detach=args.detach)
    if args.cmd in ("suspend", "resume"):
        return commands.set_suspended(kube, console, args.name, args.cmd == "suspend")
    return commands.delete_command(kube, console, args.name)


def main(argv: Sequence[str] | None = None, console: Console | None = None) -> int:
    """The console script: parse, run, and turn every failure into one line and an exit code."""
    console = console or Console()
    try:
        args = parse(build_parser(), argv)
    except FlagError as exc:
        console.say(f"error: {exc}")
        return EXIT_CODE
    try:
        return run(args, console, Path.cwd())
    except PluginError as exc:
        console.say(f"error: {exc.message}")
        return exc.code
    except ApiError as exc:
        console.say(f"error: {api_error_line(exc)}")
        return 1
    except KeyboardInterrupt:
        console.say("error: interrupted")
        return 130
    except Exception as exc:  # a bug: still one line, the traceback on request
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        console.say(
            f"error: internal error: {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)"
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
