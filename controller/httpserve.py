"""`BoundedHTTPServer`: the one HTTP server shape every listener of ours uses — the controller's
metrics and health listeners, the progress endpoint and the reporter sidecar's `/metrics` — and
`Listener`, the one lifecycle of the controller's: bound on "host:port" when built (no host: every
address; port 0: any free one, then `port`), served by a daemon thread from `start()`, stopped
and its socket closed by `shutdown()`.

Guarantees, whatever clients do (SPEC §12: every endpoint bounded in connections, time and cost):
- at most `workers` connections are served at once, each on a thread of its own; a connection
  accepted while all are busy is closed at once (never queued, never a new thread), so threads
  and memory stay bounded however many sockets a client opens;
- every connection has `deadline` seconds in all, from accept to the end of its answer — a TLS
  handshake (`context`), request line, headers and body included: a reaper thread shuts down the
  socket of any connection past its deadline, so a client fed one byte at a time, or one that
  sends nothing, is cut at the deadline (a per-read timeout alone would let it live on);
- one request per connection (HTTP/1.0 closes after the answer): an idle kept-alive connection
  never holds a worker.
`dropped` and `cut` count the connections closed for lack of a worker and for their deadline.
Standard library only: the reporter sidecar imports it.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, TypeVar

REAP_SECONDS = 0.25
L = TypeVar("L", bound="Listener")


class BoundedHTTPServer(HTTPServer):
    """An HTTPServer with the guarantees of the module doc."""

    request_queue_size = 512  # the listen backlog: a burst of connects is accepted (and judged), not
    # left in SYN retries for seconds

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        workers: int,
        deadline: float,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.context = context
        self.deadline = deadline
        self.dropped = 0
        self.cut = 0
        self._slots = threading.BoundedSemaphore(workers)
        self._lock = threading.Lock()
        self._live: dict[object, tuple[float, int]] = {}  # connection → (deadline, its fd)
        self._closed = threading.Event()
        super().__init__(address, handler)
        threading.Thread(target=self._reap, name="http-deadlines", daemon=True).start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve on a worker thread if one is free, else close the connection at once."""
        if not self._slots.acquire(blocking=False):
            self.dropped += 1
            self.shutdown_request(request)
            return
        key = object()
        with self._lock:
            self._live[key] = (time.monotonic() + self.deadline, request.fileno())
        thread = threading.Thread(target=self._serve, args=(request, client_address, key), daemon=True)
        thread.start()

    def _serve(self, request: socket.socket, client_address: Any, key: object) -> None:
        """Handle one connection; its socket is closed only after it left the reaper's table, so
        the reaper never touches a file descriptor that was closed and reused."""
        conn: socket.socket = request
        try:
            request.settimeout(self.deadline)
            if self.context is not None:
                conn = self.context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                conn.do_handshake()
            self.finish_request(conn, client_address)
        except Exception:  # not TLS, cut at its deadline, gone, or misbehaving: nothing to answer
            pass
        finally:
            with self._lock:
                self._live.pop(key, None)
            self.shutdown_request(conn)
            self._slots.release()

    def _reap(self) -> None:
        """Shut down every connection past its deadline (module doc)."""
        while not self._closed.wait(REAP_SECONDS):
            now = time.monotonic()
            with self._lock:  # _serve closes a socket only after removing it here: its fd is live
                for key, (until, fd) in list(self._live.items()):
                    if until > now:
                        continue
                    self._live.pop(key, None)
                    self.cut += 1
                    try:
                        with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as dup:
                            dup.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()


class Listener:
    """A `BoundedHTTPServer` served on a daemon thread named `name` (module doc)."""

    def __init__(
        self,
        address: str,
        handler: type[BaseHTTPRequestHandler],
        *,
        name: str,
        workers: int,
        deadline: float,
        context: ssl.SSLContext | None = None,
    ) -> None:
        host, _, port = address.rpartition(":")
        self._server = BoundedHTTPServer(
            (host or "0.0.0.0", int(port)), handler, workers=workers, deadline=deadline, context=context
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self: L) -> L:
        self._thread.start()
        return self

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
