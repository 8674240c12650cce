"""Where the plugin's output goes: results on stdout, progress and waiting lines on stderr.

Keeping the two apart lets `kubectl torchrun logs x > out.txt` or `submit ... | tee` capture
only the job's output. The progress bar is rich's (a maintained library, not hand-drawn): it
animates on a terminal and prints its final state once when stderr is a file or a pipe.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console as RichConsole
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


class Console:
    """The plugin's two output streams (replaceable in tests)."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def line(self, text: str) -> None:
        """A result line (stdout), flushed at once: logs are read while they stream."""
        self.out.write(text + "\n")
        self.out.flush()

    def say(self, text: str) -> None:
        """A status line for the person watching (stderr)."""
        self.err.write(text + "\n")
        self.err.flush()

    @contextmanager
    def progress(self, total: int, description: str) -> Iterator[Callable[[int], None]]:
        """A byte progress bar on stderr; yields `advance(n)`."""
        console = RichConsole(file=self.err)
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)
