"""Following the progress file: the latest valid record in what was appended since last time.

`Tailer(path).poll()` reads what the training program appended since the previous poll (at most
`MAX_READ_BYTES` per poll, so a program writing faster than the reporter reads cannot make one
poll unbounded) and returns the last valid record in it, or None when there is none. It holds
its own bounds:
- a partial last line waits for its newline in a buffer of at most `MAX_LINE_BYTES`; a line
  longer than that is skipped up to its newline, never kept;
- a file that is replaced (another inode) or truncated (smaller than what was read) is read
  again from its start; a file that does not exist (yet, or any more) is no record, not an error;
- nothing raises for the file's content or its absence: `OSError`s of reading end the poll with
  no record, and the next poll tries again.
"""

from __future__ import annotations

import os

from controller.progress.record import MAX_LINE_BYTES, Record, parse_line

MAX_READ_BYTES = 1024 * 1024


class Tailer:
    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._inode: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._skipping = False  # inside a line longer than MAX_LINE_BYTES, until its newline

    def poll(self) -> Record | None:
        """The last valid record appended since the previous poll (see the module docstring)."""
        try:
            data = self._read()
        except OSError:
            self.close()
            return None
        return self._feed(data) if data else None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._inode, self._offset, self._partial, self._skipping = None, None, 0, b"", False

    def _read(self) -> bytes:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.close()
            return b""
        inode = (st.st_dev, st.st_ino)
        if self._fd is None or inode != self._inode or st.st_size < self._offset:
            self.close()  # first poll, replaced, or truncated: from the start
            self._fd = os.open(self.path, os.O_RDONLY)
            self._inode = inode
        data = os.pread(self._fd, MAX_READ_BYTES, self._offset)
        self._offset += len(data)
        return data

    def _feed(self, data: bytes) -> Record | None:
        latest = None
        *lines, rest = data.split(b"\n")
        for line in lines:
            if self._skipping:
                self._skipping = False  # the end of the overlong line: drop it
                self._partial = b""
                continue
            record = parse_line(self._partial + line)
            self._partial = b""
            if record is not None:
                latest = record
        if self._skipping or len(self._partial) + len(rest) > MAX_LINE_BYTES:
            self._skipping, self._partial = True, b""
        else:
            self._partial += rest
        return latest
