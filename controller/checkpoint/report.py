"""What `prepare` chose, as rank 0's `prepare` container termination message (written there, read by
the controller into `status.checkpoint`).

`CheckpointReport.to_json()` is at most `MAX_BYTES` (4 KiB, the kubelet's limit): `{"result":
"Prepared", "checkpoint": {"root", "attempt", "latest", "step", "time", "count", "resumedFrom",
"pruned", "downloaded", "mirrored", "problems"}}` — `latest`/`resumedFrom` paths as the ranks see
them, `time` RFC 3339, `problems` one line each (a chosen checkpoint that vanished, a removal that
failed), dropped from the end to fit. `parse_report(text)` never raises: anything else is None.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PREPARED = "Prepared"
MAX_BYTES = 4096


@dataclass(frozen=True)
class CheckpointReport:
    """The checkpoints of one start, as rank 0 found them."""

    root: str
    attempt: int = 0
    latest: str | None = None
    step: int | None = None
    time: str | None = None
    count: int = 0
    resumed_from: str | None = None
    pruned: int = 0
    problems: tuple[str, ...] = field(default=())
    downloaded: str | None = None  # the copy the S3 mirror restored at this start
    mirrored: int = 0  # checkpoints uploaded to the S3 mirror at this start

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "root": self.root,
            "attempt": self.attempt,
            "latest": self.latest,
            "step": self.step,
            "time": self.time,
            "count": self.count,
            "resumedFrom": self.resumed_from,
            "pruned": self.pruned,
            "downloaded": self.downloaded,
            "mirrored": self.mirrored,
            "problems": [p[:512] for p in self.problems],
        }
        body = {k: v for k, v in body.items() if v is not None}
        while True:
            text = json.dumps({"result": PREPARED, "checkpoint": body}, separators=(",", ":"))
            if len(text.encode()) <= MAX_BYTES or not body["problems"]:
                return text
            body["problems"] = body["problems"][:-1]


def _get(data: dict[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if kind is int and isinstance(value, bool):
        return None
    return value if isinstance(value, kind) else None


def parse_report(text: str | None) -> CheckpointReport | None:
    """The report in a termination message, or None for anything else (module doc)."""
    try:
        data = json.loads(text or "")
    except ValueError:
        return None
    if (
        not isinstance(data, dict)
        or data.get("result") != PREPARED
        or not isinstance(data.get("checkpoint"), dict)
    ):
        return None
    body = data["checkpoint"]
    root = _get(body, "root", str)
    if root is None:
        return None
    problems = body.get("problems")
    return CheckpointReport(
        root=root,
        attempt=_get(body, "attempt", int) or 0,
        latest=_get(body, "latest", str),
        step=_get(body, "step", int),
        time=_get(body, "time", str),
        count=_get(body, "count", int) or 0,
        resumed_from=_get(body, "resumedFrom", str),
        pruned=_get(body, "pruned", int) or 0,
        downloaded=_get(body, "downloaded", str),
        mirrored=_get(body, "mirrored", int) or 0,
        problems=tuple(p for p in problems if isinstance(p, str)) if isinstance(problems, list) else (),
    )
