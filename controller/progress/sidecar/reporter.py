"""The reporter sidecar: `python -m controller.progress.sidecar.reporter [stack]`.

Run without arguments (the sidecar's command), it follows `TORCHRUN_PROGRESS_FILE` every
`POLL_SECONDS` (`tail.Tailer`: bounded, never raising) and keeps the latest valid record and when a
new one last appeared (`server.Latest`; a monotonic clock: what it sends is an age, so the
controller's clock is the only one that matters). It serves that record on
`TORCHRUN_REPORTER_ADDRESS` (`/metrics`, Prometheus text: `server.py`) and, when
`TORCHRUN_PROGRESS_URL` is set, POSTs it there (`Pusher`): after a change at most every
`PUSH_MIN_SECONDS`, and every `HEARTBEAT_SECONDS` without one (so a new leader learns how long
ranks have been silent) — node rank 0's with the newest complete checkpoint of the job's
checkpoints volume, scanned at most every 30 s (`progress/saved.py`; a save not accepted yet is
pushed like a change) — with the projected token read again for every push (the kubelet rotates
it). A 503 (a standby, or a leader still syncing) or a connection error is retried with doubling
backoff up to `MAX_BACKOFF`; a refusal (401/403) is logged and retried at the heartbeat. On SIGTERM
(the training container ended and the kubelet stops the sidecar) it reads the file once more and
pushes what was not accepted yet, retrying for up to `FLUSH_SECONDS` while a standby answers 503 or
nobody answers, so the controller sees the last step. It never exits on its own: a broken reporter
must not take the pod down.

When the pod restarts in place (`TORCHRUN_IN_PLACE=1`), a thread links the supervisor and the
controller (`inplace.py`: its state up, the controller's word down, through the same endpoint).

`stack` (run by `kubectl torchrun stack` through exec: `stack.py`) prints a py-spy dump of every
Python process of the pod but itself, each line prefixed `[rank R pid P]` (R the process's `RANK`,
`agent` for torchrun's own process).
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from controller.progress.saved import SCAN_SECONDS, Saved, newest_saved
from controller.progress.sidecar.inplace import TICK_SECONDS, Watcher, read_state, write_word
from controller.progress.sidecar.server import Latest, serve_metrics
from controller.progress.sidecar.stack import dump_all
from controller.progress.sidecar.tail import Tailer

POLL_SECONDS = 1.0
PUSH_MIN_SECONDS = 2.0
HEARTBEAT_SECONDS = 30.0
MAX_BACKOFF = 30.0
TIMEOUT = 10.0
FLUSH_SECONDS = 20.0  # the final push's retries on SIGTERM: well inside the default 120 s grace
FLUSH_FIRST_PAUSE = 0.2
MAX_ANSWER = 4096  # bytes of an answer read (the endpoint's are one short JSON line)


class Pusher:
    """When and what to POST (the module docstring's rules), with the I/O injected (`send`)."""

    def __init__(self, job: str, send: Callable[[dict[str, Any]], int]) -> None:
        self.job = job
        self.send = send
        self.sent_change: float | None = None  # the change last accepted
        self.next_at = 0.0
        self.backoff = PUSH_MIN_SECONDS
        self.saved: Saved | None = None  # the newest checkpoint rank 0's last scan found
        self.saved_at = 0.0  # when that scan ran (monotonic): the age sent grows from it
        self.sent_saved: Saved | None = None  # the checkpoint last accepted

    def found(self, saved: Saved | None, now: float) -> None:
        """A scan of the checkpoints root found `saved` (sent with the next push; a save not
        accepted yet makes the next tick push, as a change of the record does)."""
        if saved is not None:
            self.saved, self.saved_at = saved, now

    def _fresh_save(self) -> bool:
        return self.saved is not None and not self.saved.same_save(self.sent_saved)

    def flush(
        self,
        latest: Latest,
        budget: float = FLUSH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> int | None:
        """The pod stops: push what was not accepted yet, whatever the interval, retrying for up
        to `budget` seconds (inside the pod's grace period) while the answer may change — a
        standby's 503 (the Service sent it to the other replica), a 429, no answer — so the last
        step lands; a refusal (400/401/403/404/413) is not retried. The last status, or None when
        nothing was left to send."""
        record, changed = latest.get()
        if record is None or (changed == self.sent_change and not self._fresh_save()):
            return None
        deadline, pause = clock() + budget, FLUSH_FIRST_PAUSE
        while True:
            self.next_at = 0.0
            status = self.tick(latest, clock())
            if status in (None, 200, 400, 401, 403, 404, 413) or clock() + pause > deadline:
                return status
            sleep(pause)
            pause = min(2.0, pause * 2)

    def tick(self, latest: Latest, now: float) -> int | None:
        """Push if it is time; the HTTP status (0: no answer), or None when nothing was sent."""
        record, changed = latest.get()
        if record is None or now < self.next_at:
            return None
        due = changed != self.sent_change or now >= self.next_at + HEARTBEAT_SECONDS
        if not due and not self._fresh_save():
            return None
        body = {"job": self.job, "record": record.to_json(), "secondsSinceChange": max(0.0, now - changed)}
        saved = self.saved
        if saved is not None:
            body["checkpoint"] = Saved(
                saved.name, saved.step, saved.age + max(0.0, now - self.saved_at)
            ).to_json()
        status = self.send(body)
        if status == 200:
            self.sent_change, self.backoff = changed, PUSH_MIN_SECONDS
            self.sent_saved = saved
            if due:  # a push for a new save alone keeps the heartbeats' beat: a stall is
                self.next_at = now + PUSH_MIN_SECONDS  # confirmed by the first one after it is due
        elif status in (401, 403, 400, 413, 404):
            self.next_at = now + HEARTBEAT_SECONDS  # refused: saying it again soon changes nothing
        else:
            self.next_at = now + self.backoff
            self.backoff = min(MAX_BACKOFF, self.backoff * 2)
        return status


def https_poster(url: str, token_file: str, ca: str | None) -> Callable[[dict[str, Any]], tuple[int, Any]]:
    """POST a body to `url` with the token of `token_file`; the answer's HTTP status (0: none)
    and its JSON (None when it has none). The endpoint is verified against `ca` when given; else
    the connection is encrypted only."""
    ctx = ssl.create_default_context(cadata=ca) if ca else ssl.create_default_context()
    if not ca:
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE

    def post(body: dict[str, Any]) -> tuple[int, Any]:
        try:
            with open(token_file) as f:
                token = f.read().strip()
            req = urllib.request.Request(
                url,
                json.dumps(body).encode(),
                {"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
                method="POST",
            )
            with urllib.request.urlopen(req, context=ctx, timeout=TIMEOUT) as resp:
                raw = resp.read(MAX_ANSWER)
                try:
                    return int(resp.status), json.loads(raw)
                except ValueError:
                    return int(resp.status), None
        except urllib.error.HTTPError as err:
            _log(f"progress report refused: {err.code} {err.read(512).decode('utf-8', 'replace').strip()}")
            return int(err.code), None
        except (OSError, ValueError) as exc:
            _log(f"progress report not delivered: {exc}")
            return 0, None

    return post


def https_sender(url: str, token_file: str, ca: str | None) -> Callable[[dict[str, Any]], int]:
    """`https_poster`'s status alone: what `Pusher` needs."""
    post = https_poster(url, token_file, ca)
    return lambda body: post(body)[0]


def run(env: dict[str, str], stop: threading.Event) -> None:
    """The sidecar's loop (module docstring) until `stop`."""
    latest = Latest()
    rank = env.get("JOB_COMPLETION_INDEX", "0")
    try:
        serve_metrics(env.get("TORCHRUN_REPORTER_ADDRESS", "0.0.0.0:9400"), latest, rank)
    except OSError as exc:
        _log(f"cannot serve /metrics: {exc}")
    tailer = Tailer(env.get("TORCHRUN_PROGRESS_FILE", "/var/run/torchrun-progress/progress.jsonl"))
    pusher = None
    if env.get("TORCHRUN_PROGRESS_URL"):
        sender = https_sender(
            env["TORCHRUN_PROGRESS_URL"],
            env.get("TORCHRUN_PROGRESS_TOKEN_FILE", "/var/run/secrets/torchrun-progress/token"),
            env.get("TORCHRUN_PROGRESS_CA") or None,
        )
        pusher = Pusher(env.get("TORCHRUN_JOB_NAME", ""), sender)
    if pusher is not None and env.get("TORCHRUN_IN_PLACE") == "1":
        start_in_place(env, stop)
    # rank 0 tells the newest checkpoint while the job runs (progress/saved.py): the volume is the job's
    checkpoints = env.get("TORCHRUN_CHECKPOINT_DIR") if rank == "0" else None
    scanned = -SCAN_SECONDS
    while not stop.is_set():
        record = tailer.poll()
        now = time.monotonic()
        if record is not None:
            latest.set(record, now)
        if pusher is not None and checkpoints and now - scanned >= SCAN_SECONDS:
            scanned = now
            pusher.found(newest_saved(checkpoints), now)
        if pusher is not None:
            pusher.tick(latest, now)
        stop.wait(POLL_SECONDS)
    # stopping (the training container ended, the kubelet stops the sidecar): the last lines
    record = tailer.poll()
    if record is not None:
        latest.set(record, time.monotonic())
    if pusher is not None:
        if checkpoints:  # a save on SIGTERM is the newest: tell it with the last step
            pusher.found(newest_saved(checkpoints), time.monotonic())
        pusher.flush(latest)


def start_in_place(env: dict[str, str], stop: threading.Event) -> None:
    """The in-place link (`inplace.py`) in a daemon thread until `stop`."""
    post = https_poster(
        env["TORCHRUN_PROGRESS_URL"],
        env.get("TORCHRUN_PROGRESS_TOKEN_FILE", "/var/run/secrets/torchrun-progress/token"),
        env.get("TORCHRUN_PROGRESS_CA") or None,
    )
    state_file = env.get("TORCHRUN_SUPERVISOR_FILE", "/var/run/torchrun-progress/supervisor.json")
    control_file = env.get("TORCHRUN_CONTROL_FILE", "/var/run/torchrun-control/generation.json")
    watcher = Watcher(
        env.get("TORCHRUN_JOB_NAME", ""),
        post,
        lambda: read_state(state_file),
        lambda word: write_word(control_file, word),
    )

    def loop() -> None:
        while not stop.is_set():
            try:
                watcher.tick(time.monotonic())
            except Exception as exc:
                _log(f"in-place link: {exc}")
            stop.wait(TICK_SECONDS)

    threading.Thread(target=loop, name="in-place", daemon=True).start()


def _log(message: str) -> None:
    print(f"reporter: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["stack"]:
        return dump_all(os.getpid())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run(dict(os.environ), stop)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
