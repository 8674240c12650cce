"""Reading ahead in a thread, so decompressing and hashing overlap with writing files.

`Prefetcher(source)` reads `source` in a background thread into a bounded queue (at most
`DEPTH` chunks of `CHUNK` bytes ahead: memory stays bounded) and hands the bytes out, in order,
through `read(n)` (short reads allowed; b"" at the end). An exception raised by `source` in the
thread is raised by `read` in the caller's thread, where it would have been raised without the
thread. `close()` stops the thread and waits for it, so after it the caller may use `source`
again (`receive` then reads what is left of the upload). zlib, hashlib and os.read release the
GIL, which is what makes the thread pay: `tar -xzf` gets the same overlap from its gzip child.
"""

from __future__ import annotations

import contextlib
import queue
import threading

from controller.sync.gunzip import Readable

CHUNK = 256 * 1024
DEPTH = 16


class Prefetcher:
    """Bytes of `source`, read ahead by a thread; see the module docstring."""

    def __init__(self, source: Readable) -> None:
        self._source = source
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=DEPTH)
        self._stop = threading.Event()
        self._chunk = b""
        self._pos = 0
        self._ended = False
        self._thread = threading.Thread(target=self._run, name="sync-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                data = self._source.read(CHUNK)
                self._put(data)
                if not data:
                    return
        except BaseException as e:  # handed to the reader, raised in its thread
            self._put(e)

    def _put(self, item: bytes | BaseException) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def read(self, size: int = -1, /) -> bytes:
        if self._pos >= len(self._chunk):
            if self._ended:
                return b""
            item = self._queue.get()
            if isinstance(item, BaseException):
                self._ended = True
                raise item
            self._chunk, self._pos = item, 0
            if not item:
                self._ended = True
                return b""
        end = len(self._chunk) if size < 0 else min(len(self._chunk), self._pos + size)
        out = self._chunk[self._pos : end]
        self._pos = end
        return out

    def close(self) -> None:
        """Stop reading ahead and wait for the thread (it finishes the read it is in)."""
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):  # unblock a put() waiting for room
                self._queue.get(timeout=0.1)
        self._thread.join()
