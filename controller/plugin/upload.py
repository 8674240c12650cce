"""Upload an archive into a sync pod: `receive` over the pods/exec subresource (docs/workspace.md).

The archive goes through the kube-apiserver's exec endpoint as a websocket (the `kubernetes`
package's client, channel protocol v5 or v4): stdin frames of `CHUNK` bytes, read from the file
on disk, so memory does not grow with the archive. `receive` reads exactly `--size` bytes and
never waits for end-of-file, so nothing depends on closing stdin.

The command's outcome comes only from the status channel (3): a `Status` JSON that is `Success`,
or `Failure` whose `NonZeroExitCode` cause carries the exit code. On failure the sync program's
one-line `Reason: message` (its last stderr line) is the error; a connection that ends without a
status is an interrupted upload. Either way the generation stays unpublished (the sync program
publishes only a complete, verified tree) and the error says to retry with `sync`.

`Traffic` counts the bytes of every websocket message a session sends and receives (the channel
byte included, the websocket framing not): what `sync` reports, and what its tests bound.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.stream import ws_client as _ws_client
from websocket import WebSocketException

from controller.plugin.archive import Archive
from controller.plugin.errors import PluginError, api_error_line
from controller.plugin.kube import Kube
from controller.rest.errors import ApiError
from controller.rest.resources import PODS
from controller.sync import protocol

CHUNK = 1024 * 1024  # per websocket frame: larger frames measured faster through the API server (test bed)
FINISH_TIMEOUT = 600.0  # after the last byte: extraction of a large tree on a slow volume
_STDOUT, _STDERR, _STATUS = 1, 2, 3
ws_client: Any = _ws_client  # an untyped package


@dataclass(frozen=True)
class ExecOutcome:
    """What an exec ended with: exit code (None: no status arrived), stdout and stderr text."""

    exit_code: int | None
    stdout: str
    stderr: str
    status_message: str = ""


def exit_code(status: bytes) -> tuple[int | None, str]:
    """The exit code in a status-channel `Status` (0 for `Success`), and its message.

    A `Failure` without an `ExitCode` cause (the command could not start) is exit code 126, like
    a shell's "cannot execute"; unreadable or empty data is `None` (no outcome known)."""
    try:
        st = json.loads(status)
    except ValueError:
        return None, ""
    if not isinstance(st, dict) or "status" not in st:
        return None, ""
    if st["status"] == "Success":
        return 0, ""
    message = str(st.get("message") or "")
    for cause in (st.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message")), message
            except (TypeError, ValueError):
                break
    return 126, message


def failure_line(outcome: ExecOutcome) -> str:
    """The sync program's one-line reason: the last non-empty stderr line, else the status text."""
    lines = [line.strip() for line in outcome.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else (outcome.status_message or f"exit code {outcome.exit_code}")


@dataclass
class Traffic:
    """Bytes of the exec sessions' messages: `sent` to the pod, `received` from it."""

    sent: int = 0
    received: int = 0


class _CountingSocket:
    """The websocket under `WSClient`, counting each data message's bytes into a `Traffic`."""

    def __init__(self, sock: Any, traffic: Traffic) -> None:
        self._sock = sock
        self._traffic = traffic

    def send(self, payload: Any, opcode: int = 1) -> Any:
        self._traffic.sent += len(payload)
        return self._sock.send(payload, opcode=opcode)

    def recv_data_frame(self, control_frame: bool = False) -> Any:
        opcode, frame = self._sock.recv_data_frame(control_frame)
        self._traffic.received += len(getattr(frame, "data", b"") or b"")
        return opcode, frame

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class ExecSession:
    """One exec session: the websocket and what came back on each channel."""

    def __init__(
        self,
        kube: Kube,
        pod: str,
        command: list[str],
        container: str = protocol.CONTAINER,
        stdin: bool = True,
        traffic: Traffic | None = None,
    ) -> None:
        query = [
            ("container", container),
            ("stdin", str(stdin).lower()),
            ("stdout", "true"),
            ("stderr", "true"),
        ]
        query += [("command", word) for word in command]
        path = PODS.path(kube.namespace, pod, "exec") + "?" + urllib.parse.urlencode(query)
        url = kube.server.replace("https://", "wss://", 1).replace("http://", "ws://", 1) + path
        try:
            self.ws: Any = ws_client.WSClient(
                kube.configuration, url, headers=None, capture_all=False, binary=True
            )
        except WebSocketException as exc:
            body = getattr(exc, "resp_body", None)
            code = int(getattr(exc, "status_code", 0) or 0)
            detail = api_error_line(ApiError(code, body)) if body else str(exc)
            raise PluginError(f"cannot open an exec session in pod {pod}: {detail}") from None
        except OSError as exc:
            raise PluginError(f"cannot reach the API server at {kube.server}: {exc}") from None
        if traffic is not None:
            self.ws.sock = _CountingSocket(self.ws.sock, traffic)
        self._stdout = b""  # what read_stdout took off the channel so far

    def poll(self, timeout: float) -> None:
        self.ws.update(timeout=timeout)

    def read_stdout(self) -> bytes:
        """What stdout brought since the last call (`outcome` still has all of it)."""
        data: bytes = self.ws.read_channel(_STDOUT)
        self._stdout += data
        return data

    def outcome(self) -> ExecOutcome:
        code, message = exit_code(self.ws.read_channel(_STATUS))
        out = (self._stdout + self.ws.read_channel(_STDOUT)).decode("utf-8", "replace")
        err = self.ws.read_channel(_STDERR).decode("utf-8", "replace")
        return ExecOutcome(code, out, err, message)


def _drain(session: ExecSession, deadline: float) -> None:
    """Read frames until the server closes the session (the command ended) or `deadline`."""
    try:
        while session.ws.is_open() and time.monotonic() < deadline:
            session.poll(timeout=1.0)
    except (WebSocketException, OSError):
        pass


def _send(session: ExecSession, archive_path: Path, progress: Callable[[int], None]) -> None:
    with open(archive_path, "rb") as f:
        while chunk := f.read(CHUNK):
            session.ws.write_stdin(chunk)
            progress(len(chunk))
            session.poll(timeout=0)
            if not session.ws.is_open():
                return  # the command ended early: its status says why


def run_command(kube: Kube, pod: str, container: str, command: list[str], timeout: float) -> ExecOutcome:
    """Run `command` (no stdin) in `container` of `pod` and return its outcome once it ended or
    `timeout` passed (then without an exit code)."""
    session = ExecSession(kube, pod, command, container, stdin=False)
    _drain(session, time.monotonic() + timeout)
    outcome = session.outcome()
    session.ws.close()
    return outcome


def run_receive(
    kube: Kube,
    pod: str,
    command: list[str],
    archive_path: Path,
    progress: Callable[[int], None],
    traffic: Traffic | None = None,
) -> ExecOutcome:
    """Stream the file at `archive_path` into `command`'s stdin in `pod` and return its outcome.
    A connection lost mid-way returns whatever status arrived (usually none)."""
    session = ExecSession(kube, pod, command, traffic=traffic)
    return finish_sending(session, archive_path, progress)


def finish_sending(session: ExecSession, path: Path, progress: Callable[[int], None]) -> ExecOutcome:
    """Stream the file at `path` into the session's stdin, wait for the command to end, close the
    session; its outcome (a connection lost mid-way: whatever status arrived, usually none)."""
    interrupted: BaseException | None = None
    try:
        _send(session, path, progress)
    except (WebSocketException, OSError) as exc:
        interrupted = exc
    _drain(session, time.monotonic() + (5.0 if interrupted else FINISH_TIMEOUT))
    outcome = session.outcome()
    session.ws.close()
    if outcome.exit_code is None and interrupted is not None:
        return ExecOutcome(None, outcome.stdout, outcome.stderr, f"connection lost: {interrupted}")
    return outcome


def upload(
    kube: Kube,
    job: str,
    generation: int,
    archive: Archive,
    archive_path: Path,
    progress: Callable[[int], None],
    traffic: Traffic | None = None,
) -> dict[str, Any]:
    """Upload into `<job>-sync-<generation>`; the marker JSON `receive` printed. `PluginError`
    with the sync program's reason (or "interrupted") otherwise, saying to retry with `sync`."""
    pod = protocol.sync_pod_name(job, generation)
    retry = f"the job stays as it was; retry with `kubectl torchrun sync {job}`"
    command = protocol.receive_argv(generation, size=archive.size, sha256=archive.sha256)
    try:
        outcome = run_receive(kube, pod, command, archive_path, progress, traffic)
    except KeyboardInterrupt:
        raise PluginError(f"upload interrupted (Ctrl-C); {retry}", code=130) from None
    if outcome.exit_code is None:
        raise PluginError(f"upload interrupted ({outcome.status_message or 'no exit status'}); {retry}")
    if outcome.exit_code != 0:
        raise PluginError(f"upload failed: {failure_line(outcome)}; {retry}")
    try:
        marker: dict[str, Any] = json.loads(outcome.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        marker = {"generation": generation, "sha256": archive.sha256}
    return marker
