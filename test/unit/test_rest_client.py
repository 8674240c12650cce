"""RESTClient retries and timeouts: the pure retry decision, then the client against a local HTTP
server (http.server on 127.0.0.1) that misbehaves the way an API server or a network can. The
server is a harness for the client, not a fake of Kubernetes: it answers with scripted statuses,
resets, silence or a slow stream, and counts what reached it."""

from __future__ import annotations

import http.server
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient, is_retryable
from controller.rest.config import ClusterConfig
from controller.rest.errors import ApiError
from controller.rest.resources import CONFIGMAPS

RESET = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))


def api_error(status: int, retry_after: float | None = None) -> ApiError:
    return ApiError(status, {"reason": "x"}, retry_after=retry_after)


class TestRetryDecision:
    """client-go's rest/request.go + with_retry.go: what one failed attempt allows."""

    @pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
    def test_429_and_5xx_with_retry_after_are_retried_for_any_verb(self, method: str) -> None:
        assert is_retryable(method, api_error(429, retry_after=1))
        assert is_retryable(method, api_error(503, retry_after=0))
        assert is_retryable(method, api_error(500, retry_after=2))

    @pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
    def test_writes_are_not_retried_without_retry_after(self, method: str) -> None:
        assert not is_retryable(method, api_error(500))
        assert not is_retryable(method, api_error(503))
        assert not is_retryable(method, api_error(429))
        assert not is_retryable(method, RESET)
        assert not is_retryable(method, ConnectionRefusedError())

    def test_reads_are_retried_on_connection_errors_and_5xx(self) -> None:
        assert is_retryable("GET", RESET)
        assert is_retryable("GET", ConnectionResetError())
        assert is_retryable("GET", api_error(500))
        assert is_retryable("GET", api_error(503))

    def test_never_retried(self) -> None:
        for method in ("GET", "POST"):
            assert not is_retryable(method, api_error(429))  # throttled but no hint: caller backs off
            assert not is_retryable(method, api_error(501))
            assert not is_retryable(method, api_error(404))
            assert not is_retryable(method, api_error(409))
            assert not is_retryable(method, api_error(400, retry_after=1))
            assert not is_retryable(method, urllib3.exceptions.ReadTimeoutError(None, "/", "timed out"))
            assert not is_retryable(method, ValueError("bad json"))


# -- the client against a misbehaving local server ----------------------------------------------


class Harness(http.server.ThreadingHTTPServer):
    """Answers each request with the next scripted action for its method; records every request
    that reached it (method, path) after its body was read."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: dict[str, list[Any]] = {}
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()  # ends every hanging handler

    def next_action(self, method: str, path: str) -> Any:
        with self.lock:
            self.seen.append((method, path))
            actions = self.script.get(method) or [("status", 200, {}, {"kind": "ok"})]
            return actions.pop(0) if len(actions) > 1 else actions[0]

    def count(self, method: str) -> int:
        with self.lock:
            return sum(1 for m, _ in self.seen if m == method)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Harness

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)  # the whole request has reached the server
        action = self.server.next_action(self.command, self.path)
        kind = action[0]
        if kind == "status":
            _, code, headers, body = action
            data = json.dumps(body).encode()
            self.send_response(code)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif kind == "reset":  # RST instead of a response
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
        elif kind == "silence":  # accept, then never answer
            self.server.release.wait(30)
            self.close_connection = True
        elif kind == "stream":  # a watch: 200, then the given lines at the given pace, then silence
            _, lines, pace = action
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in lines:
                chunk = (json.dumps(line) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                if self.server.release.wait(pace):
                    break
            self.server.release.wait(30)
            self.close_connection = True

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except OSError:  # the socket we reset on purpose
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815 - http.server dispatches on these names


@pytest.fixture
def harness() -> Iterator[Harness]:
    server = Harness()
    # a short poll interval: shutdown() waits for the loop's next look (0.5 s by default)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


def client_for(server: Harness, **kwargs: Any) -> RESTClient:
    cfg = ClusterConfig(host=f"http://127.0.0.1:{server.server_address[1]}")
    return RESTClient(cfg, metrics=ControllerMetrics(), **kwargs)


def cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}}


def test_429_with_retry_after_is_honoured(harness: Harness) -> None:
    throttled = ("status", 429, {"Retry-After": "1"}, {"reason": "TooManyRequests"})
    harness.script["POST"] = [throttled, ("status", 201, {}, cm("a"))]
    rest = client_for(harness)
    started = time.monotonic()
    out = rest.create(CONFIGMAPS, cm("a"))
    assert out["metadata"]["name"] == "a"
    assert harness.count("POST") == 2
    assert time.monotonic() - started >= 1.0


def test_5xx_is_retried_for_a_read(harness: Harness) -> None:
    harness.script["GET"] = [
        ("status", 503, {}, {"reason": "ServiceUnavailable"}),
        ("status", 200, {}, cm("a")),
    ]
    rest = client_for(harness)
    assert rest.get(CONFIGMAPS, "a", "ns")["metadata"]["name"] == "a"
    assert harness.count("GET") == 2


def test_a_read_answered_with_a_reset_is_retried(harness: Harness) -> None:
    harness.script["GET"] = [("reset",), ("status", 200, {}, cm("a"))]
    rest = client_for(harness)
    assert rest.get(CONFIGMAPS, "a", "ns")["metadata"]["name"] == "a"
    assert harness.count("GET") == 2


def test_a_post_answered_with_500_is_sent_exactly_once(harness: Harness) -> None:
    harness.script["POST"] = [("status", 500, {}, {"reason": "InternalError", "message": "etcd"})]
    rest = client_for(harness)
    with pytest.raises(ApiError) as err:
        rest.create(CONFIGMAPS, cm("a"))
    assert err.value.status == 500
    time.sleep(0.5)  # a retry would have arrived by now
    assert harness.count("POST") == 1


def test_a_post_answered_with_a_reset_is_sent_exactly_once(harness: Harness) -> None:
    harness.script["POST"] = [("reset",)]
    rest = client_for(harness)
    with pytest.raises((urllib3.exceptions.HTTPError, OSError)):
        rest.create(CONFIGMAPS, cm("a"))
    time.sleep(0.5)
    assert harness.count("POST") == 1


def test_a_dead_watch_request_is_noticed_within_the_read_timeout(harness: Harness) -> None:
    harness.script["GET"] = [("silence",)]
    rest = client_for(harness, watch_read_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        rest.watch(CONFIGMAPS, "ns", resource_version="1", timeout_seconds=300)
    assert time.monotonic() - started < 5
    assert harness.count("GET") == 1  # a watch is never retried here: the reflector decides


def test_a_watch_that_goes_silent_ends_within_the_read_timeout(harness: Harness) -> None:
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "5"}}}
    harness.script["GET"] = [("stream", [bookmark], 0)]
    rest = client_for(harness, watch_read_timeout=1.0)
    stream = rest.watch(CONFIGMAPS, "ns", resource_version="1", timeout_seconds=300)
    started = time.monotonic()
    events = [ev.type for ev in stream]  # ends: silence is not an error (the caller resumes)
    assert events == ["BOOKMARK"]
    assert stream.timed_out
    assert 1.0 <= time.monotonic() - started < 5


def test_an_idle_watch_with_bookmarks_outlives_the_read_timeout(harness: Harness) -> None:
    """The read timeout bounds the silence between reads, not the watch: bookmarks keep it open."""
    bookmarks = [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(i)}}} for i in range(8)]
    harness.script["GET"] = [("stream", bookmarks, 0.4)]
    rest = client_for(harness, watch_read_timeout=1.0)
    stream = rest.watch(CONFIGMAPS, "ns", resource_version="1", timeout_seconds=300)
    seen = 0
    started = time.monotonic()
    for _ in stream:
        seen += 1
        if seen == len(bookmarks):
            stream.stop()
    assert seen == len(bookmarks)
    assert not stream.timed_out
    assert time.monotonic() - started > 2.5  # well past the 1 s read timeout
