"""Why a sync failed: one exception, `SyncError(reason, message)`, and the reasons it may carry.

The reasons are the CamelCase words of docs/workspace.md; they travel unchanged from the sync
program's termination message to the job's `WorkspaceReady=False` condition, so they are API.
`message` is one human line (no newlines), safe to print as `Reason: message`.
"""

from __future__ import annotations

INVALID_ARCHIVE = "InvalidArchive"
ARCHIVE_TOO_LARGE = "ArchiveTooLarge"
CHECKSUM_MISMATCH = "ChecksumMismatch"
UPLOAD_INCOMPLETE = "UploadIncomplete"
UPLOAD_TIMEOUT = "UploadTimeout"
GIT_FETCH_FAILED = "GitFetchFailed"
S3_FETCH_FAILED = "S3FetchFailed"
SOURCE_NOT_FOUND = "SourceNotFound"
WORKSPACE_ERROR = "WorkspaceError"
# not produced by the sync program: what a reader reports when it cannot tell (garbage, no message)
SYNC_FAILED = "SyncFailed"

REASONS = frozenset(
    {
        INVALID_ARCHIVE,
        ARCHIVE_TOO_LARGE,
        CHECKSUM_MISMATCH,
        UPLOAD_INCOMPLETE,
        UPLOAD_TIMEOUT,
        GIT_FETCH_FAILED,
        S3_FETCH_FAILED,
        SOURCE_NOT_FOUND,
        WORKSPACE_ERROR,
        SYNC_FAILED,
    }
)


def one_line(text: str, limit: int = 1024) -> str:
    """`text` on one line (whitespace runs collapsed), cut to `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class SyncError(Exception):
    """A sync that cannot succeed as asked; `reason` is one of the words above."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        self.message = one_line(message)
        super().__init__(f"{reason}: {self.message}")
