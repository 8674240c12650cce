"""Limits on what a generation may hold, and the tally that enforces them as entries arrive.

`Tally` is charged before anything is written (an entry's declared size is known from its header),
so an archive over a limit is refused before it fills the volume: `ArchiveTooLarge`.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.sync.errors import ARCHIVE_TOO_LARGE, SyncError

DEFAULT_MAX_FILES = 500_000


@dataclass(frozen=True)
class Limits:
    """`max_bytes`: total uncompressed bytes of regular files (None: no limit); `max_files`: entries."""

    max_bytes: int | None = None
    max_files: int = DEFAULT_MAX_FILES


@dataclass(frozen=True)
class Stats:
    """What a filled generation holds: entries (files, dirs, links) and bytes of file data, and
    the SHA-256 of what it came from when only the fill knows it (an s3 archive object)."""

    files: int
    bytes: int
    sha256: str | None = None


class Tally:
    """Counts entries and bytes against `Limits`; raises `ArchiveTooLarge` on the first excess."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.files = 0
        self.bytes = 0

    def add(self, size: int = 0) -> None:
        """Charge one entry carrying `size` bytes of data."""
        self.files += 1
        self.bytes += size
        if self.files > self.limits.max_files:
            raise SyncError(ARCHIVE_TOO_LARGE, f"more than {self.limits.max_files} entries")
        if self.limits.max_bytes is not None and self.bytes > self.limits.max_bytes:
            raise SyncError(ARCHIVE_TOO_LARGE, f"more than {self.limits.max_bytes} bytes uncompressed")

    def stats(self) -> Stats:
        return Stats(files=self.files, bytes=self.bytes)
