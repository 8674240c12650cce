"""The controller's progress endpoint: HTTPS `POST /v1/progress` from the reporter sidecars.

Every replica serves it (`--progress-bind-address`); only the leader, once its caches synced,
accepts: a standby answers 503 (`Retry-After`), and the reporter retries — the Service sends it
to any replica, so a retry soon reaches the leader. The leader:
1. reads at most `MAX_BODY` bytes of JSON `{"job": NAME, "record": {...}, "secondsSinceChange": S}`
   (and, from rank 0, `"checkpoint": {...}`: `saved.parse_saved`)
   (413 beyond, 400 when it is not that);
2. reviews the bearer token (`identity.TokenReviewer`: 401 without one or when it is refused,
   screened first at no API cost; 429 with `Retry-After` when reviews are at their cap);
3. proves the token's pod is a worker of job NAME (`identity.prove`, from the caches: 403);
   a refusal at 2 or 3 is a value (`identity.Refusal`: its status and message are the answer);
4. parses the record like the sidecar did (`record.parse_object`: a pod is not trusted either)
   and keeps it (`store.ProgressStore`); when the job needs a pass, `enqueue`s it.
Served as every listener of the controller is (`httpserve.Listener`: a daemon thread from `start()`
to `shutdown()`); connections are bounded (`httpserve.BoundedHTTPServer`: `WORKERS` at once, excess
closed at once, `DEADLINE` seconds each in all); refusals are logged at most one line per 10 s
(`SampledLog`).
A body with `"inPlace"` and no record is an in-place supervisor's state (its sidecar's link,
`sidecar/inplace.py`): proven the same way, kept in `supervisors.SupervisorStates` (a change
enqueues the job), and answered with the word for that pod (`supervisors.word`).
An answer is one JSON line `{"accepted": bool, "message": ...}` (and `"inPlace": WORD` for a
supervisor). Nothing here writes to the API server but the TokenReview: the job reconciler
writes status (`torchrunjob/progress.py`).
"""

from __future__ import annotations

import json
import math
import ssl
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

import structlog
from prometheus_client import Counter

from controller.cache import Lister
from controller.clock import utc_now_precise
from controller.httpserve import Listener
from controller.progress.identity import Refusal, Reporter, TokenReviewer, prove
from controller.progress.record import parse_object
from controller.progress.saved import parse_saved
from controller.progress.sidecar.inplace import parse_state
from controller.progress.store import ProgressStore
from controller.progress.supervisors import SupervisorStates, word
from controller.rest.errors import ApiError

log = structlog.get_logger("progress")
PATH = "/v1/progress"
MAX_BODY = 64 * 1024
DEADLINE = 10.0  # seconds a connection has in all: TLS handshake, headers, body, answer
WORKERS = 320  # connections served at once (256 pods of one job reporting together, and more)


class ProgressEndpoint(Listener):
    def __init__(
        self,
        address: str,
        context: ssl.SSLContext,
        *,
        reviewer: TokenReviewer,
        store: ProgressStore,
        pods: Lister,
        worker_jobs: Lister,
        jobs: Lister,
        accepting: Callable[[], bool],
        enqueue: Callable[[str], None],
        reports: Counter,
        supervisors: SupervisorStates | None = None,
    ) -> None:
        self.reviewer, self.store, self.enqueue = reviewer, store, enqueue
        self.supervisors = supervisors if supervisors is not None else SupervisorStates()
        self.pods, self.worker_jobs, self.jobs = pods, worker_jobs, jobs
        self.accepting = accepting
        self.reports = reports
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                status, message, *extra = endpoint.handle(self)
                endpoint.reports.labels(result=str(status)).inc()
                answer = {"accepted": status == 200, "message": message}
                if extra:
                    answer["inPlace"] = extra[0]
                body = (json.dumps(answer) + "\n").encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if status in (429, 503):
                    self.send_header("Retry-After", "2")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # one line per refusal instead
                return

        self.refusals = SampledLog("progress report refused")
        super().__init__(
            address, Handler, name="progress-endpoint", workers=WORKERS, deadline=DEADLINE, context=context
        )

    def handle(self, request: BaseHTTPRequestHandler) -> tuple[Any, ...]:
        """The HTTP status and message of one request (module docstring), and a supervisor's word
        when it was one (`handle_in_place`)."""
        try:
            length = int(request.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            request.close_connection = True  # its body stays unread
            return 413, f"a report is at most {MAX_BODY} bytes, with its Content-Length"
        raw = request.rfile.read(length)  # read before any answer: unread data makes a reset
        now = utc_now_precise()  # the report's age is told as of now, not after its token review
        if request.path.split("?", 1)[0] != PATH:
            return 404, f"not found: POST {PATH}"
        if not self.accepting():
            return 503, "not the leader (or its caches are not synced yet): retry"
        auth = request.headers.get("Authorization") or ""
        if not auth.startswith("Bearer ") or not auth[7:].strip():
            return 401, "no bearer token: send the pod's projected service-account token"
        try:
            body = json.loads(raw)
            if isinstance(body, dict) and "inPlace" in body and "record" not in body:
                return self.handle_in_place(auth[7:].strip(), body, now)
            job, seconds = body["job"], float(body.get("secondsSinceChange", 0))
            record = parse_object(body["record"])
            if not isinstance(job, str) or record is None or not math.isfinite(seconds):
                raise ValueError
            saved = parse_saved(body.get("checkpoint"))  # nonsense is no checkpoint, not a refusal
        except (ValueError, KeyError, TypeError, RecursionError):
            return 400, 'expected {"job": NAME, "record": {...}, "secondsSinceChange": SECONDS}'
        reporter = self.proven(auth[7:].strip(), job)
        if isinstance(reporter, tuple):
            return reporter
        if self.store.report(
            reporter.key,
            job_uid=reporter.job_uid,
            attempt=reporter.attempt,
            rank=reporter.rank,
            record=record,
            seconds_since_change=seconds,
            now=now,
            saved=saved,
        ):
            self.enqueue(reporter.key)
        return 200, "ok"

    def handle_in_place(self, token: str, body: dict[str, Any], now: datetime) -> tuple[Any, ...]:
        """A supervisor's state (`sidecar/inplace.py`): kept (`supervisors.SupervisorStates`; a
        change enqueues the job) and answered with the word for its pod (`supervisors.word`)."""
        job = body.get("job")
        state = parse_state(body.get("inPlace"))
        if not isinstance(job, str) or (body.get("inPlace") is not None and state is None):
            return 400, 'expected {"job": NAME, "inPlace": {"generation": G, "state": S, "exitCode": C}}'
        reporter = self.proven(token, job)
        if isinstance(reporter, tuple):
            return reporter
        ns, _, name = reporter.key.partition("/")
        raw_job = self.jobs.get(name, ns)
        if raw_job is None:
            return 404, f"TorchrunJob {reporter.key} is gone"
        if state is not None and self.supervisors.tell(
            reporter.key,
            attempt=reporter.attempt,
            rank=reporter.rank,
            state=state,
            now=now,
            pod=reporter.pod_uid,
        ):
            self.enqueue(reporter.key)
        # only a supervisor whose torchrun succeeded waits for "every rank succeeded": the copy of
        # the attempt's states is made for it alone, not on every POST of every running rank
        done = state is not None and state.state == "succeeded"
        states = self.supervisors.view(reporter.key, reporter.attempt) if done else None
        return 200, "ok", word(raw_job, self.worker_jobs.get(name, ns), reporter.attempt, states)

    def proven(self, token: str, job: str) -> Reporter | tuple[int, str]:
        """The reporter `token` proves for `job`, or the answer to send: a refusal (said in the
        sampled log), or 503 when the token review itself failed."""
        try:
            reporter = self.prove(token, job)
        except ApiError as exc:
            log.warning("token review failed", error=str(exc))
            return 503, "token review failed: retry"
        if isinstance(reporter, Refusal):
            self.refusals.said(reporter.status, reporter.message)
            return reporter.status, reporter.message
        return reporter

    def prove(self, token: str, job: str) -> Reporter | Refusal:
        identity = self.reviewer.review(token)
        if isinstance(identity, Refusal):
            return identity
        return prove(
            identity,
            job,
            pods=lambda ns, name: self.pods.get(name, ns),
            worker_jobs=lambda ns, name: self.worker_jobs.get(name, ns),
            jobs=lambda ns, name: self.jobs.get(name, ns),
        )


class SampledLog:
    """One log line per `every` seconds at most, saying how many were left unsaid since: a flood
    of refusals costs no disk and no log pipeline (the counter still counts every one)."""

    def __init__(self, event: str, every: float = 10.0) -> None:
        self.event, self.every = event, every
        self._lock = threading.Lock()
        self._next = 0.0
        self._unsaid = 0

    def said(self, status: int, reason: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                self._unsaid += 1
                return
            unsaid, self._unsaid, self._next = self._unsaid, 0, now + self.every
        log.info(self.event, status=status, reason=reason, unsaid_since_last=unsaid)


def report_counter(registry: Any) -> Counter:
    """`torchrun_progress_reports_total{result}`: reports by the HTTP status they got."""
    return Counter(
        "torchrun_progress_reports",
        "Progress reports received, by the HTTP status answered (200 accepted).",
        ["result"],
        registry=registry,
    )
