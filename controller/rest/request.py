"""Sending one request to the API server: rate limit, write fence, timeout, retry, metrics.

`RequestSender` owns one urllib3 pool and one client-side token bucket (QPS/burst). A `Request`
is what a verb wants sent (client-go's `rest.Request`); `send` makes one attempt of it, `do`
makes as many as the retry policy allows and returns the decoded JSON body. The pool and the
credentials come from a `ClusterConfig` (`transport.py`, `credentials.py`): each attempt carries
the credentials current at that moment (a rotated token file, a refreshed exec credential), and
a 401 tells the credentials so (an exec plugin runs again for the next attempt; the 401 itself is
raised like any error status, never retried here).

Guarantees, per attempt (`send`): it waits for a token, then asks the write fence (below); every
attempt has a connect and a read timeout, or one total timeout; every attempt is counted in
`rest_client_requests_total{verb,resource,code}` (code `<error>` when no response came) and its
latency observed; a status ≥ 400 is raised as `ApiError` with the server's Status and its
Retry-After, and no other status is.

What `do` retries (`is_retryable`, mirroring client-go's rest/request.go `request` and
with_retry.go `IsNextRetry`/`checkWait`):
- 429 or 5xx *with* a Retry-After header, for any verb, after that many seconds (capped at 30):
  the server itself asks us to come back (API Priority and Fairness rejects with 429 before
  handling; a 5xx with Retry-After is the server vouching that a retry is fine), as in client-go.
- Reads (GET) only: connection errors (refused, reset, closed mid-response) and 5xx without
  Retry-After (not 501), after a short jittered exponential delay. client-go retries neither
  without Retry-After except resets/EOF on GET; a GET is idempotent, so retrying it is harmless.
- Nothing else. A write (POST/PUT/PATCH/DELETE) that met a connection error, or a 5xx/429
  without Retry-After, may have reached the server and been applied; it is never sent again here:
  the error goes to the caller, whose reconcile re-reads and decides (a rate-limited requeue).
  Read timeouts are not retried either: the attempt already used its whole time budget.
Each retry is counted in `rest_client_retries_total{verb,resource}`.

The write fence (leader election): with a `write_fence`, every write (not GET) asks it right
before it would be sent and, refused, raises `LeadershipLostError` having sent nothing, so a
replica that lost the Lease cannot write. `Request.fenced=False` is only for the elector's own
Lease writes.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from controller.flowcontrol import TokenBucket
from controller.metrics.registry import ControllerMetrics
from controller.rest.config import ClusterConfig
from controller.rest.credentials import Credentials, CredentialSource
from controller.rest.errors import ApiError, LeadershipLostError
from controller.rest.transport import Transport

CONNECT_TIMEOUT = 10.0
MAX_RETRY_AFTER = 30.0  # seconds: a longer Retry-After is waited only this long
# How long a watch connection may stay silent before we drop it and watch again. client-go
# notices dead connections with HTTP/2 pings (30 s idle + 15 s ping timeout); over HTTP/1.1 only
# a read timeout can. Silence alone is not proof of death: kube-apiserver bookmarks a watch about
# once a minute only while its watch cache moves past the watch's resourceVersion (any change to
# that resource type in the cluster; apiserver cache_watcher.go `process`), so a watch on an idle
# resource type can stay silent until etcd's progress notification (10 min by default). Hence
# silence ends the watch normally and the caller resumes it at once from its last resourceVersion;
# a dead connection then shows up as the resumed watch failing.
WATCH_READ_TIMEOUT = 120.0
CONNECTION_ERRORS = (
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.NewConnectionError,
    urllib3.exceptions.ConnectTimeoutError,
    urllib3.exceptions.MaxRetryError,
    ConnectionError,
)


@dataclass(frozen=True)
class Request:
    """One API call as a verb describes it; the sender decides how and how often to send it."""

    verb: str  # the metric label: get, list, create, update/status, create/eviction, watch, ...
    method: str  # GET, POST, PUT, PATCH, DELETE
    path: str
    resource: str = ""  # the metric label: `Resource.key`
    params: Mapping[str, Any] | None = None  # the query; None values are left out
    body: Any = None  # sent as compact JSON
    content_type: str | None = None  # application/json when there is a body and none is given
    attempts: int | None = None  # the retry budget (1: a single try); None: the sender's
    timeout: float | None = None  # bounds each try as a whole, connect included
    fenced: bool = True  # False bypasses the write fence
    accept: str = "application/json"  # what the answer may be (the issuer's keys: application/jwk-set+json)

    def url(self, host: str) -> str:
        query = {k: v for k, v in (self.params or {}).items() if v is not None}
        return host + self.path + ("?" + urlencode(query) if query else "")

    def data(self) -> bytes | None:
        return None if self.body is None else json.dumps(self.body, separators=(",", ":")).encode()

    def content_type_header(self) -> str | None:
        if self.body is None:
            return self.content_type
        return self.content_type or "application/json"


def is_retryable(method: str, exc: BaseException) -> bool:
    """May a request with this HTTP method that failed with `exc` be sent again? (module doc)"""
    if isinstance(exc, ApiError):
        if exc.retry_after is not None and (exc.status == 429 or exc.status >= 500):
            return True
        return method == "GET" and exc.status >= 500 and exc.status != 501
    return method == "GET" and isinstance(exc, CONNECTION_ERRORS)


def retry_delay(exc: BaseException | None, attempt: int) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based): the server's Retry-After
    (capped), else 0.1 s doubling up to 5 s, times a jitter in [1, 2)."""
    if isinstance(exc, ApiError) and exc.retry_after is not None:
        return min(exc.retry_after, MAX_RETRY_AFTER)
    return float(min(5.0, 0.1 * 2 ** (attempt - 1)) * (1 + random.random()))


def request_headers(
    credentials: CredentialSource, user_agent: str, content_type: str | None, accept: str = "application/json"
) -> dict[str, str]:
    """JSON headers with the credentials' current authentication, fresh per call because a token
    file or an exec credential plugin may rotate it."""
    headers = {"Accept": accept, "User-Agent": user_agent, **credentials.headers()}
    if content_type:
        headers["Content-Type"] = content_type
    return headers


def _raise_for_status(resp: urllib3.BaseHTTPResponse, req: Request, stream: bool) -> None:
    if resp.status < 400:
        return
    payload = resp.read() if stream else resp.data
    if stream:
        resp.release_conn()
    hint = resp.headers.get("Retry-After")  # seconds only, as client-go parses it
    retry_after = float(hint) if hint and hint.isdigit() else None
    raise ApiError(resp.status, payload, req.verb, req.path, retry_after=retry_after)


class RequestSender:
    """Sends `Request`s to one API server over one pool; see the module docstring."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        qps: float = 50.0,
        burst: int = 100,
        pool_size: int = 16,
        timeout: float = 30.0,
        max_attempts: int = 5,
        metrics: ControllerMetrics | None = None,
        user_agent: str = "torchrun-controller",
        write_fence: Callable[[], bool] | None = None,
        watch_read_timeout: float = WATCH_READ_TIMEOUT,
        credentials: CredentialSource | None = None,
    ) -> None:
        self.config = config
        self.host = config.host.rstrip("/")
        self.credentials = credentials or Credentials(config)
        self._transport = Transport(config, self.credentials, pool_size)
        self._limiter = TokenBucket(qps, burst)
        self.timeout = timeout  # the read timeout of `do`'s attempts
        self.watch_read_timeout = watch_read_timeout  # a watch stream's (`RESTClient.watch`)
        self.max_attempts = max_attempts
        self.metrics = metrics or ControllerMetrics()
        self.user_agent = user_agent
        # asked right before each write is sent; False means "not the leader": send nothing
        self.write_fence = write_fence

    def send(self, req: Request, *, stream: bool, read_timeout: float | None) -> urllib3.BaseHTTPResponse:
        """One attempt, never retried. `stream`: the body is left unread for the caller (who
        must close the response); `read_timeout` bounds each read (None: no bound) unless
        `req.timeout` bounds the whole attempt."""
        waited = self._limiter.accept()
        self.metrics.rest_rate_limiter_wait.labels(req.verb).observe(waited)
        if req.fenced and req.method != "GET" and self.write_fence is not None and not self.write_fence():
            raise LeadershipLostError(req.verb, req.path)
        if req.timeout is not None:
            timeout = urllib3.Timeout(total=req.timeout)
        else:
            timeout = urllib3.Timeout(connect=CONNECT_TIMEOUT, read=read_timeout)
        started = time.perf_counter()
        code = "<error>"
        try:
            resp = self._transport.pool().request(
                req.method,
                req.url(self.host),
                body=req.data(),
                headers=request_headers(
                    self.credentials, self.user_agent, req.content_type_header(), req.accept
                ),
                timeout=timeout,
                preload_content=not stream,
                retries=False,
            )
            code = str(resp.status)
        finally:
            self.metrics.rest_requests.labels(req.verb, req.resource, code).inc()
            self.metrics.rest_latency.labels(req.verb, req.resource).observe(time.perf_counter() - started)
        if resp.status == 401:
            self.credentials.unauthorized()
        _raise_for_status(resp, req, stream)
        return resp

    def do(self, req: Request) -> dict[str, Any]:
        """Send with the retry policy (module doc); the decoded JSON body ({} when empty)."""

        def count_retry(state: RetryCallState) -> None:
            self.metrics.rest_retries.labels(req.verb, req.resource).inc()

        def wait(state: RetryCallState) -> float:
            return retry_delay(state.outcome.exception() if state.outcome else None, state.attempt_number)

        for attempt in Retrying(
            retry=retry_if_exception(lambda exc: is_retryable(req.method, exc)),
            stop=stop_after_attempt(req.attempts or self.max_attempts),
            wait=wait,
            before_sleep=count_retry,
            reraise=True,
        ):
            with attempt:
                resp = self.send(req, stream=False, read_timeout=self.timeout)
        payload = resp.data
        out: dict[str, Any] = json.loads(payload) if payload else {}
        return out
