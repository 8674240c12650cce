"""HTTP endpoints of the controller process: `/metrics` (Prometheus text format), `/healthz` (the
process serves requests) and `/readyz` (a readiness function, e.g. caches synced and, with leader
election, leading or standing by). A daemon thread serves them from `start()`; `shutdown()` stops
it (`httpserve.Listener`). Bounded (`httpserve.BoundedHTTPServer`): `WORKERS` connections at once,
the excess closed at once, `DEADLINE` seconds each in all — so idle or trickling connections never
exhaust threads, and the health listener (`--health-addr`, its own server) keeps answering the
kubelet's probes.
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from controller.httpserve import Listener

WORKERS = 16
DEADLINE = 5.0


class MetricsServer(Listener):
    def __init__(
        self,
        address: str,
        registry: CollectorRegistry,
        ready: Callable[[], bool] = lambda: True,
        healthy: Callable[[], bool] = lambda: True,
    ) -> None:
        registry_ = registry
        ready_, healthy_ = ready, healthy

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, generate_latest(registry_), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez"):
                    ok = healthy_()
                    self._reply(200 if ok else 500, b"ok" if ok else b"unhealthy")
                elif path == "/readyz":
                    ok = ready_()
                    self._reply(200 if ok else 503, b"ok" if ok else b"not ready")
                else:
                    self._reply(404, b"not found")

            def _reply(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # quiet: scraped every few seconds
                return

        super().__init__(address, Handler, name="metrics-server", workers=WORKERS, deadline=DEADLINE)
