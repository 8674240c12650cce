"""The reporter sidecar's in-place link: the supervisor's state up, the controller's word down.

Run by `reporter.run` when the pod restarts in place (`TORCHRUN_IN_PLACE=1`:
`manifests/inplace.py`), in a thread of its own. `Watcher.tick` reads the supervisor's state file
(`TORCHRUN_SUPERVISOR_FILE`, `torchrun_supervisor.write_state`: at most `MAX_STATE` bytes, anything
else is no state) and POSTs `{"job": NAME, "inPlace": {"generation": G, "state": S, "exitCode":
C}}` to the progress endpoint — at once when the state changed, every `FAST_SECONDS` while the
supervisor waits for a word (a fresh pod, a failure told, or its torchrun done: it ends its pod
at the word `final`), else every `WATCH_SECONDS` (the controller's stall restarts and reloads
reach healthy pods this way) — but every `FAST_SECONDS` too while the answer says `soon` (a hot
reload is on its way), for at most `SOON_SECONDS` from the first such answer, so an upload that
never comes costs no lasting load; a 503 or no answer is tried again after `RETRY_SECONDS`, a
refusal after `REFUSED_SECONDS`. The answer's word
`{"generation": G, "final": bool}` is written to `TORCHRUN_CONTROL_FILE` (whole: write, then
rename) when it differs from the last one written; the supervisor polls that file. Nothing here
raises: a broken link must not take the pod down (the supervisor's own timeout ends a failed
pod whose word never comes).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WATCH_SECONDS = 2.0
FAST_SECONDS = 0.5
SOON_SECONDS = 60.0
RETRY_SECONDS = 1.0
REFUSED_SECONDS = 30.0
TICK_SECONDS = 0.1
MAX_STATE = 4096
STATES = ("waiting", "running", "failed", "succeeded", "stopped")


@dataclass(frozen=True)
class State:
    """The supervisor's state as it wrote it."""

    generation: int
    state: str
    exit_code: int | None
    workspace: int | None = None  # the workspace generation it copied for a hot reload in place

    def to_json(self) -> dict[str, Any]:
        body = {"generation": self.generation, "state": self.state, "exitCode": self.exit_code}
        return body if self.workspace is None else {**body, "workspace": self.workspace}


def parse_state(data: object) -> State | None:
    """A supervisor state from JSON (the endpoint parses a pod's the same way), or None."""
    if not isinstance(data, dict):
        return None
    generation, state, code = data.get("generation"), data.get("state"), data.get("exitCode")
    if not isinstance(generation, int) or isinstance(generation, bool) or not 0 <= generation < 2**31:
        return None
    if state not in STATES:
        return None
    if code is not None and (not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 255):
        return None
    workspace = data.get("workspace")
    if workspace is not None and (
        not isinstance(workspace, int) or isinstance(workspace, bool) or workspace < 0
    ):
        return None
    return State(generation, state, code, workspace)


def read_state(path: str) -> State | None:
    """The state file's state, or None (missing, being replaced, too long, not a state)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_STATE + 1)
        if len(raw) > MAX_STATE:
            return None
        return parse_state(json.loads(raw))
    except (OSError, ValueError):
        return None


def parse_word(data: object) -> dict[str, Any] | None:
    """The controller's word from an answer's `inPlace`, or None."""
    if not isinstance(data, dict):
        return None
    generation = data.get("generation")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        return None
    return {"generation": generation, "final": bool(data.get("final"))}


def write_word(path: str, word: dict[str, Any]) -> bool:
    """Replace the control file whole; False (said once by the caller) when it cannot."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".word-", dir=os.path.dirname(path) or ".")
        with os.fdopen(fd, "w") as out:
            json.dump(word, out)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return True
    except OSError:
        return False


class Watcher:
    """When to POST the state and what to do with the answer (module doc), I/O injected: `send`
    answers (HTTP status, the answer's JSON or None), `read` the state, `write` the word."""

    def __init__(
        self,
        job: str,
        send: Callable[[dict[str, Any]], tuple[int, Any]],
        read: Callable[[], State | None],
        write: Callable[[dict[str, Any]], bool],
    ) -> None:
        self.job, self.send, self.read, self.write = job, send, read, write
        self.sent: State | None = None  # the state last accepted
        self.word: dict[str, Any] | None = None  # the word last written
        self.next_at = 0.0  # the next POST when nothing changed
        self.retry_at = 0.0  # no POST before this, even for a change: the last one failed
        self.soon_since: float | None = None  # when the answers began to say `soon`

    def _waiting(self, state: State | None) -> bool:
        if state is None or state.state not in ("waiting", "failed", "succeeded"):
            return False
        return self.word is None or (self.word["generation"] <= state.generation and not self.word["final"])

    def tick(self, now: float) -> int | None:
        """POST if it is time; the HTTP status (0: no answer), or None when nothing was sent."""
        state = self.read()
        changed = state is not None and state != self.sent
        if now < self.retry_at or (now < self.next_at and not changed):
            return None
        body: dict[str, Any] = {"job": self.job, "inPlace": None if state is None else state.to_json()}
        status, answer = self.send(body)
        if status == 200:
            self.sent = state
            said = answer.get("inPlace") if isinstance(answer, dict) else None
            word = parse_word(said)
            if word is not None and word != self.word and self.write(word):
                self.word = word
            soon = isinstance(said, dict) and said.get("soon") is True
            self.soon_since = (self.soon_since if self.soon_since is not None else now) if soon else None
            hurry = self.soon_since is not None and now - self.soon_since < SOON_SECONDS
            self.next_at = now + (FAST_SECONDS if hurry or self._waiting(state) else WATCH_SECONDS)
            self.retry_at = 0.0
        else:
            pause = REFUSED_SECONDS if status in (400, 401, 403, 404, 413) else RETRY_SECONDS
            self.next_at = self.retry_at = now + pause
        return status
