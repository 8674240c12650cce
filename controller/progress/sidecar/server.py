"""The reporter sidecar's `/metrics` server: the latest record, as Prometheus text.

`Latest` holds the latest valid record and the monotonic time it appeared (the reporter's loop
sets it, the server and the pusher read it). `serve_metrics` serves it on the sidecar's address
from a daemon thread (`torchrun_training_step`, `torchrun_training_total_steps`,
`torchrun_training_epoch`, `torchrun_training_samples_per_second`,
`torchrun_training_seconds_since_change`, the user's numbers as `torchrun_training_metric{name}`,
each labelled with the node `rank`): at most `SERVE_WORKERS` scrapes at once, each within
`SCRAPE_DEADLINE` seconds (`httpserve.BoundedHTTPServer`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from controller.httpserve import BoundedHTTPServer
from controller.progress.record import Record

SCRAPE_DEADLINE = 10.0  # one scrape's whole request, as long as a push may take (reporter.TIMEOUT)
SERVE_WORKERS = 8  # /metrics scrapes at once; more are closed at once (httpserve.py)


@dataclass
class Latest:
    """The latest record and the monotonic time it appeared; guarded by `lock`."""

    record: Record | None = None
    changed: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, record: Record, now: float) -> None:
        with self.lock:
            self.record, self.changed = record, now

    def get(self) -> tuple[Record | None, float]:
        with self.lock:
            return self.record, self.changed


def metric_lines(latest: Latest, rank: str, now: float) -> Iterator[str]:
    """The Prometheus text of the latest record."""
    record, changed = latest.get()
    if record is None:
        return
    label = f'rank="{rank}"'
    gauges = {
        "torchrun_training_step": record.step,
        "torchrun_training_total_steps": record.total_steps,
        "torchrun_training_epoch": record.epoch,
        "torchrun_training_samples_per_second": record.samples_per_second,
        "torchrun_training_seconds_since_change": now - changed,
    }
    for name, value in gauges.items():
        if value is not None:
            yield f"# TYPE {name} gauge"
            yield f"{name}{{{label}}} {float(value)!r}"
    if record.metrics:
        yield "# TYPE torchrun_training_metric gauge"
        for key, value in record.metrics.items():  # names are validated: no quote or backslash
            yield f'torchrun_training_metric{{{label},name="{key}"}} {value!r}'


def serve_metrics(address: str, latest: Latest, rank: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                body, code = b"not found\n", 404
            else:
                body, code = ("\n".join(metric_lines(latest, rank, time.monotonic())) + "\n").encode(), 200
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    host, _, port = address.rpartition(":")
    server = BoundedHTTPServer(
        (host or "0.0.0.0", int(port)), Handler, workers=SERVE_WORKERS, deadline=SCRAPE_DEADLINE
    )
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
