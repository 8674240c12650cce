"""The sync pod's result as its container termination message: written here, parsed by the controller.

`write_termination_message(path, result)` writes at most `MAX_BYTES` (4 KiB, the kubelet's limit)
of JSON, shortening the message rather than the structure:
`{"result": "Synced", "generation": G, "sha256": ..., "files": n, "bytes": n, "source": ...}` or
`{"result": "Failed", "generation": G, "reason": ..., "message": ...}`.
`parse_termination_message(text)` never raises: text that is not such a JSON object (empty,
truncated, log lines) gives a `Failed` result with reason `SyncFailed` and the text's start.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.sync.errors import SYNC_FAILED, SyncError, one_line
from controller.sync.generations import Marker

SYNCED = "Synced"
FAILED = "Failed"
MAX_BYTES = 4096


@dataclass(frozen=True)
class SyncResult:
    """One sync's outcome as the controller sees it."""

    result: str
    generation: int | None = None
    sha256: str | None = None
    files: int | None = None
    bytes: int | None = None
    source: str | None = None
    reason: str | None = None
    message: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.result == SYNCED

    @classmethod
    def synced(cls, marker: Marker) -> SyncResult:
        return cls(SYNCED, marker.generation, marker.sha256, marker.files, marker.bytes, marker.source)

    @classmethod
    def failed(cls, generation: int | None, error: SyncError) -> SyncResult:
        return cls(FAILED, generation, reason=error.reason, message=error.message)

    def to_json(self) -> str:
        """Compact JSON of at most MAX_BYTES bytes (the message is shortened to fit)."""
        fields: dict[str, Any] = {k: v for k, v in self.__dict__.items() if v is not None}
        text = json.dumps(fields, separators=(",", ":"), sort_keys=True)
        message = self.message or ""
        while len(text.encode()) > MAX_BYTES and message:
            message = message[: len(message) // 2]  # halving: a few rounds, whatever the escaping
            fields["message"] = message + "…"
            text = json.dumps(fields, separators=(",", ":"), sort_keys=True)
        return text


def write_termination_message(path: Path, result: SyncResult) -> None:
    """Write the result where the kubelet reads the termination message; best effort."""
    write_text_message(path, result.to_json())


def write_text_message(path: Path, text: str) -> None:
    """Write one line of JSON where the kubelet reads the termination message; best effort."""
    with contextlib.suppress(OSError):
        path.write_text(text + "\n")


def parse_termination_message(text: str | None) -> SyncResult:
    """The result in a termination message; `Failed`/`SyncFailed` for anything unreadable."""
    try:
        data = json.loads(text or "")
    except ValueError:
        data = None
    if not isinstance(data, dict) or data.get("result") not in (SYNCED, FAILED):
        return _unreadable(text)
    if data["result"] == SYNCED:
        if _opt_int(data, "generation") is None:
            return _unreadable(text)
        return SyncResult(
            SYNCED,
            _opt_int(data, "generation"),
            _opt_str(data, "sha256"),
            _opt_int(data, "files"),
            _opt_int(data, "bytes"),
            _opt_str(data, "source"),
        )
    reason = _opt_str(data, "reason")
    return SyncResult(
        FAILED,
        _opt_int(data, "generation"),
        reason=reason if reason and reason.isalnum() else SYNC_FAILED,
        message=one_line(_opt_str(data, "message") or "the sync failed without a message"),
    )


def _unreadable(text: str | None) -> SyncResult:
    shown = one_line(text or "", 200)
    message = f"unreadable sync result: {shown!r}" if shown else "the sync program left no result"
    return SyncResult(FAILED, reason=SYNC_FAILED, message=message)


def _opt_int(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None
