"""One container's command as a local process: started, logged, waited for, stopped.

The process gets its own session (process group), so stopping it stops what it started too
(git, tar); its output goes to the container's CRI log file; its end becomes a `Termination`,
the fields of a kubelet's `containerStatuses[].state.terminated`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeagent.crilog import CRILogWriter, timestamp

MAX_MESSAGE = 4096  # the kubelet's limit on a termination message


@dataclass(frozen=True)
class Termination:
    exit_code: int
    reason: str  # Completed or Error, as a kubelet says
    message: str
    started_at: str
    finished_at: str


class ContainerProcess:
    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log: CRILogWriter,
        termination_log: Path,
        fallback_to_logs: bool,
    ) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.log = log
        self.termination_log = termination_log
        self.fallback_to_logs = fallback_to_logs
        self.started_at = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, on_exit: Callable[[Termination], None]) -> None:
        """Start the process; `on_exit` is called from another thread once it has ended."""
        self.termination_log.parent.mkdir(parents=True, exist_ok=True)
        self.termination_log.write_bytes(b"")
        self.started_at = timestamp()
        try:
            if not self.argv:
                raise OSError(
                    "the container has no command, and the test bed cannot know its image's entrypoint"
                )
            self._proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:  # the kubelet's StartError: exit code 128, the error as message
            self.log.write("stderr", str(exc).encode())
            on_exit(Termination(128, "StartError", str(exc), self.started_at, timestamp()))
            return
        assert self._proc.stdout is not None and self._proc.stderr is not None
        pumps = [self.log.pump("stdout", self._proc.stdout), self.log.pump("stderr", self._proc.stderr)]
        threading.Thread(target=self._wait, args=(pumps, on_exit), daemon=True).start()

    def _wait(self, pumps: list[threading.Thread], on_exit: Callable[[Termination], None]) -> None:
        assert self._proc is not None
        code = self._proc.wait()
        for pump in pumps:
            pump.join(5)  # a child that kept the pipes open must not hold the report forever
        exit_code = code if code >= 0 else 128 - code  # killed by signal N: 128 + N
        on_exit(
            Termination(
                exit_code,
                "Completed" if exit_code == 0 else "Error",
                self._message(exit_code),
                self.started_at,
                timestamp(),
            )
        )

    def _message(self, exit_code: int) -> str:
        raw = self.termination_log.read_bytes()[:MAX_MESSAGE] if self.termination_log.exists() else b""
        message = raw.decode(errors="replace")
        if not message.strip() and exit_code != 0 and self.fallback_to_logs:
            message = self.log.tail()
        return message

    @property
    def started(self) -> bool:
        return bool(self.started_at)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, grace: float) -> None:
        """SIGTERM to the whole process group, SIGKILL after `grace` seconds; returns at once."""
        if not self.running():
            return
        assert self._proc is not None
        pgid = self._proc.pid
        _signal_group(pgid, signal.SIGTERM)

        def kill_later() -> None:
            assert self._proc is not None
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(grace)
            _signal_group(pgid, signal.SIGKILL)  # the leader may be gone while children live on

        threading.Thread(target=kill_later, daemon=True).start()

    def wait(self, timeout: float) -> bool:
        """Whether the process has ended within `timeout` seconds (True if it never started)."""
        if self._proc is None:
            return True
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
