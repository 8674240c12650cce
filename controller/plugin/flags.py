"""Command-line mistakes as one line naming the flag: `error: --nodes: must be at least 1, not 0`.

argparse reports a mistake by printing the whole usage and its own sentence; here a `Parser`
raises `FlagError` instead, whose line names the flag first (`--nodes: ...`, `--queue: required`,
`--bogus: unknown flag ...`), and `main` prints it and exits 2. The full usage is printed only for
`--help`. The value rules live in the flags' type functions (`at_least`), so a bad value is
refused before anything is read or sent.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from typing import NoReturn

EXIT_CODE = 2  # argparse's, and the shell convention for a usage error

_ARGUMENT = re.compile(r"^argument (?P<names>[^:]+): (?P<why>.*)$")
_REQUIRED = re.compile(r"^the following arguments are required: (?P<names>.*)$")
_ONE_OF = re.compile(r"^one of the arguments (?P<names>.*) is required$")
_AMBIGUOUS = re.compile(r"^ambiguous option: (?P<flag>\S+) could match (?P<candidates>.*)$")
_OTHER_FLAG = re.compile(r"\bargument (?=-)")  # "not allowed with argument --nodes"
_CHOICE = re.compile(r"^invalid choice: '?(?P<value>[^' ]*)'?")


class FlagError(Exception):
    """A command-line mistake; `str()` is the one line to print after `error: `."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser (subcommand parsers too) whose mistakes raise `FlagError`."""

    def error(self, message: str) -> NoReturn:
        raise FlagError(flag_error_line(message, self.prog))


def at_least(minimum: int) -> Callable[[str], int]:
    """The type of a flag taking a whole number ≥ `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def _flag_name(names: str) -> str:
    """`-n/--namespace` → `--namespace`: the long spelling, as users read it in --help."""
    spellings = names.split("/")
    return next((s for s in spellings if s.startswith("--")), spellings[0])


def flag_error_line(message: str, prog: str) -> str:
    """argparse's `message` (from the parser `prog`) as one line naming the flag first."""
    if m := _ARGUMENT.match(message):
        name, why = _flag_name(m["names"]), m["why"]
        if name == "COMMAND" and (choice := _CHOICE.match(why)):
            return f"{choice['value']}: unknown command ({prog} --help lists the commands)"
        return f"{name}: {_OTHER_FLAG.sub('', why)}"
    if m := _REQUIRED.match(message):
        return f"{m['names']}: required ({prog} --help)"
    if m := _ONE_OF.match(message):
        return f"{' or '.join(m['names'].split())}: one is required ({prog} --help)"
    if m := _AMBIGUOUS.match(message):
        return f"{m['flag']}: ambiguous, could be {m['candidates']}"
    return message


def unknown_arguments_line(extra: Sequence[str], prog: str) -> str:
    """The first argument nobody takes: an unknown flag, or one word too many."""
    first = extra[0]
    if first.startswith("-") and len(first) > 1:
        return f"{first.split('=', 1)[0]}: unknown flag ({prog} --help lists the flags)"
    return f"{first!r}: unexpected argument ({prog} --help)"


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse `argv` (None: the process's); `FlagError` on any mistake, unknown flags included."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        cmd = getattr(args, "cmd", None)
        raise FlagError(unknown_arguments_line(extra, f"{parser.prog} {cmd}" if cmd else parser.prog))
    return args
