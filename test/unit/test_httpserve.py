"""Every listener's bounds (controller/httpserve.py), on real sockets: idle connections never
exhaust threads, a request fed one byte at a time is cut at its deadline, and the server answers
again as soon as a worker is free. The metrics/health server and the progress endpoint use it."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from prometheus_client import CollectorRegistry

from controller.httpserve import BoundedHTTPServer
from controller.metrics.server import WORKERS, MetricsServer


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def server() -> Iterator[BoundedHTTPServer]:
    srv = BoundedHTTPServer(("127.0.0.1", 0), Hello, workers=4, deadline=1.0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def get(port: int, path: str = "/", timeout: float = 5.0) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return int(r.status)


def test_idle_connections_hold_at_most_the_workers_and_the_rest_are_closed(server: BoundedHTTPServer) -> None:
    port = server.server_address[1]
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    try:
        until = time.monotonic() + 10
        while server.dropped < 296 and time.monotonic() < until:  # the accept loop catches up
            assert threading.active_count() - before <= 4  # 300 sockets, 4 worker threads
            time.sleep(0.05)
        assert server.dropped >= 296 and threading.active_count() - before <= 4
        time.sleep(1.5)  # past the deadline, the 4 that held workers are cut
        assert get(port) == 200  # their reads timed out: the workers are free again
    finally:
        for s in idle:
            s.close()


def test_a_request_fed_one_byte_at_a_time_is_cut_at_its_deadline(server: BoundedHTTPServer) -> None:
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port)) as s:
        started = time.monotonic()
        request = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 200
        cut_at = None
        for byte in request:
            try:
                s.sendall(bytes([byte]))
            except OSError:
                cut_at = time.monotonic() - started
                break
            time.sleep(0.02)  # 50 bytes/s: each read alone would be well inside any per-read timeout
            s.settimeout(0.001)
            try:
                if s.recv(1) == b"":  # the server closed it
                    cut_at = time.monotonic() - started
                    break
            except TimeoutError:
                pass
            except OSError:
                cut_at = time.monotonic() - started
                break
    assert cut_at is not None and 0.9 <= cut_at <= 2.5, cut_at
    assert server.cut == 1 and get(port) == 200  # the reaper cut it, not a per-read timeout


def test_the_health_listener_answers_while_the_metrics_listener_is_flooded() -> None:
    registry = CollectorRegistry()
    metrics = MetricsServer("127.0.0.1:0", registry).start()
    health = MetricsServer("127.0.0.1:0", registry).start()
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", metrics.port)) for _ in range(300)]
    try:
        time.sleep(0.3)
        assert threading.active_count() - before <= WORKERS
        assert get(health.port, "/healthz") == 200
    finally:
        for s in idle:
            s.close()
        metrics.shutdown()
        health.shutdown()
