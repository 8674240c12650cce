"""`status.progress` as `kubectl torchrun status` prints it (pure): one line with a bar.

    Progress:   [########............] 42%  step 420/1000  812.5 samples/s  ETA 1h5m (12:30Z)  loss=1.84

The bar shows `percent` (no bar without `totalSteps`); the rate is the reported
`samplesPerSecond`; the ETA is `status.progress.eta` as a time left from `now`, shown only while
the job's phase is Running (a failed, finished, suspended or pending job has no end in sight, even
where a controller of an older version left one in the status); then the user's metrics, as
reported by rank `rank` at `updateTime` (its age).
"""

from __future__ import annotations

import datetime
from typing import Any

WIDTH = 20


def progress_line(job: dict[str, Any], now: datetime.datetime) -> str | None:
    """The `Progress:` value for `job`, or None when it never reported."""
    p = (job.get("status") or {}).get("progress")
    if not p:
        return None
    parts = []
    if p.get("percent") is not None:
        filled = min(WIDTH, int(p["percent"]) * WIDTH // 100)
        parts.append(f"[{'#' * filled}{'.' * (WIDTH - filled)}] {p['percent']}%")
    if p.get("step") is not None:
        parts.append(f"step {p['step']}" + (f"/{p['totalSteps']}" if p.get("totalSteps") else ""))
    if p.get("epoch") is not None:
        parts.append(f"epoch {p['epoch']:g}")
    if p.get("samplesPerSecond") is not None:
        parts.append(f"{p['samplesPerSecond']:g} samples/s")
    if p.get("eta") and job["status"].get("phase") == "Running":
        parts.append(f"ETA {_left(p['eta'], now)}")
    parts += [f"{k}={v:.4g}" for k, v in sorted((p.get("metrics") or {}).items())]
    said = (
        f"(rank {p.get('rank', '?')}, {_left(p['updateTime'], now, ago=True)})" if p.get("updateTime") else ""
    )
    return "  ".join(parts + ([said] if said else []))


def _left(timestamp: str, now: datetime.datetime, ago: bool = False) -> str:
    at = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = int((now - at).total_seconds() if ago else (at - now).total_seconds())
    text = _duration(max(0, seconds))
    return f"{text} ago" if ago else f"{text} ({at.strftime('%H:%MZ')})"


def _duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"
