"""The watch stream: newline-delimited JSON events from one streaming response.

Guarantees: `open_watch` sends the watch once (never retried here: the reflector owns that
decision) through the sender's rate limiter, fence and metrics, and raises at once if the server
refuses it. Iterating a `WatchStream` yields `WatchEvent`s in the server's order and ends, never
raising, when the server ends the watch, after `stop()` (from any thread), or when the
connection stayed silent for the read timeout (`timed_out` is then True); any other failure
raises. The response is closed and its connection released however iteration ends.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import urllib3

from controller.rest.request import Request, RequestSender


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
    object: dict[str, Any]


def open_watch(sender: RequestSender, req: Request, read_timeout: float) -> WatchStream:
    """Start the watch `req` describes; a response not started within `read_timeout` raises
    `ReadTimeoutError`, and so does an error status (`ApiError`)."""
    return WatchStream(sender.send(req, stream=True, read_timeout=read_timeout))


class WatchStream:
    """The events of one watch response; see the module docstring."""

    def __init__(self, resp: urllib3.BaseHTTPResponse) -> None:
        self._resp = resp
        self._stopped = False
        self.timed_out = False

    def __iter__(self) -> Iterator[WatchEvent]:
        buf = b""
        try:
            for chunk in self._resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        ev = json.loads(line)
                        yield WatchEvent(ev["type"], ev["object"])
        except urllib3.exceptions.ReadTimeoutError:
            self.timed_out = True
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
            if not self._stopped:
                raise
        finally:
            self.close()

    def stop(self) -> None:
        """Interrupt a blocked read from another thread; iteration then ends quietly."""
        self._stopped = True
        # shutting the socket down wakes a thread blocked in recv() at once (TLS included)
        sock = getattr(getattr(self._resp, "connection", None), "sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
            else:
                self._resp.shutdown()
        except (ValueError, OSError, AttributeError):  # already closed: nothing to interrupt
            pass

    def close(self) -> None:
        self._resp.close()
        self._resp.release_conn()
