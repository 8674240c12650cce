"""Container log files in the CRI format, the one kubelets write and kwok's `Logs` serve.

One line per record: `<RFC 3339 time, UTC> <stdout|stderr> <F|P> <text>`, where `P` marks a
partial line (a record cut at `MAX_RECORD` bytes, continued by the next) and `F` its last part.
kwok reads them with the kubelet's own reader (k8s.io/cri-client pkg/logs), so `kubectl logs`
and its `--timestamps`, `--tail`, `--since` and `-f` behave as on a real node.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

MAX_RECORD = 16 * 1024  # the kubelet's maximum log line before splitting


def timestamp(when: datetime | None = None) -> str:
    return (when or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class CRILogWriter:
    """Appends records to one container's log file; safe to share between the stdout and
    stderr pumps of one process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        self._lock = threading.Lock()

    def write(self, stream: str, text: bytes, *, partial: bool = False) -> None:
        """One record: a line of output without its newline, or a cut piece of a longer one."""
        tag = b"P" if partial else b"F"
        with self._lock, self.path.open("ab") as f:
            f.write(b"%s %s %s %s\n" % (timestamp().encode(), stream.encode(), tag, text.rstrip(b"\n")))

    def pump(self, stream: str, source: IO[bytes]) -> threading.Thread:
        """Copy `source` line by line until it ends, in a thread of its own."""

        def run() -> None:
            with source:
                for line in iter(lambda: source.readline(MAX_RECORD), b""):
                    # a line longer than a record comes in pieces; only its last ends in \n
                    self.write(stream, line, partial=not line.endswith(b"\n") and len(line) == MAX_RECORD)

        thread = threading.Thread(target=run, name=f"log-{self.path.name}-{stream}", daemon=True)
        thread.start()
        return thread

    def tail(self, max_lines: int = 80, max_bytes: int = 2048) -> str:
        """The last lines of output, texts only, as the kubelet's FallbackToLogsOnError takes them."""
        texts = []
        for record in self.path.read_bytes().splitlines()[-max_lines:]:
            fields = record.split(b" ", 3)
            if len(fields) == 4:
                texts.append(fields[3] + (b"\n" if fields[2] == b"F" else b""))
        return b"".join(texts)[-max_bytes:].decode(errors="replace")
