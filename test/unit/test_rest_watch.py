"""rest/watch.py: a WatchStream over a scripted response — events however the bytes are chunked,
the three quiet endings (server end, silence, stop) and the loud ones, and the response always
closed. The stream over a real socket is in test_rest_client.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from controller.rest.watch import WatchEvent, WatchStream

ADDED = {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "1"}}}
BOOKMARK = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "2"}}}


class ScriptedResponse:
    """Streams `chunks`, then raises `end` (if any); records closing."""

    def __init__(self, chunks: list[bytes], end: BaseException | None = None) -> None:
        self.chunks, self.end = chunks, end
        self.closed = self.released = False

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        yield from self.chunks
        if self.end is not None:
            raise self.end

    def shutdown(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True


def stream_of(resp: ScriptedResponse) -> WatchStream:
    raw: Any = resp
    return WatchStream(raw)


def lines(*events: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
def test_events_are_whole_however_the_bytes_are_chunked(size: int) -> None:
    data = lines(ADDED, BOOKMARK) + b"\n  \n"  # blank lines (keep-alives) are skipped
    resp = ScriptedResponse([data[i : i + size] for i in range(0, len(data), size)])
    stream = stream_of(resp)
    assert list(stream) == [WatchEvent("ADDED", ADDED["object"]), WatchEvent("BOOKMARK", BOOKMARK["object"])]
    assert not stream.timed_out
    assert resp.closed and resp.released


def test_silence_for_the_read_timeout_ends_the_watch_quietly() -> None:
    resp = ScriptedResponse([lines(ADDED)], urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"))
    stream = stream_of(resp)
    assert [e.type for e in stream] == ["ADDED"]
    assert stream.timed_out and resp.closed


def test_a_broken_connection_raises_unless_the_watch_was_stopped() -> None:
    broken = urllib3.exceptions.ProtocolError("Connection broken", ConnectionResetError())
    resp = ScriptedResponse([lines(ADDED)], broken)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        list(stream_of(resp))
    assert resp.closed and resp.released

    stopped = ScriptedResponse([lines(ADDED)], OSError("shut down"))
    stream = stream_of(stopped)
    seen = []
    for event in stream:
        seen.append(event.type)
        stream.stop()  # as another thread would, while the read is blocked
    assert seen == ["ADDED"] and not stream.timed_out and stopped.closed


def test_a_line_that_is_not_json_raises() -> None:
    with pytest.raises(ValueError):
        list(stream_of(ScriptedResponse([b"<html>proxy error</html>\n"])))
