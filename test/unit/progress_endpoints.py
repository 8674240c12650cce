"""A progress endpoint with empty caches that does not lead, for the unit tests that only need
its listener (TLS, bounds): every report gets 503 before any token is looked at."""

from __future__ import annotations

import ssl
from typing import Any, cast

from prometheus_client import CollectorRegistry

from controller.cache import Indexer, Lister
from controller.progress.endpoint import ProgressEndpoint, report_counter
from controller.progress.identity import TokenReviewer
from controller.progress.store import ProgressStore


def standby_endpoint(context: ssl.SSLContext) -> ProgressEndpoint:
    """Started on a free port of 127.0.0.1; the caller shuts it down."""
    empty = Lister(Indexer())
    return ProgressEndpoint(
        "127.0.0.1:0",
        context,
        reviewer=TokenReviewer(cast(Any, None)),  # never reached: this replica does not lead
        store=ProgressStore(),
        pods=empty,
        worker_jobs=empty,
        jobs=empty,
        accepting=lambda: False,
        enqueue=lambda key: None,
        reports=report_counter(CollectorRegistry()),
    ).start()
