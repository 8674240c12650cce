"""The progress endpoint's HTTP edges, without a cluster: a standby's 503 and its Retry-After,
bad requests answered and counted, and a client that never finishes its TLS handshake holding
nobody up. What a leader accepts is tested on the control plane (test/integration/test_progress.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from progress_endpoints import standby_endpoint
from testbed import UNVERIFIED

from controller.progress.endpoint import ProgressEndpoint
from controller.progress.tls import server_context


@pytest.fixture
def endpoint() -> Iterator[ProgressEndpoint]:
    server = standby_endpoint(server_context(None))
    yield server
    server.shutdown()


def post(port: int, path: str = "/v1/progress", body: bytes = b"{}") -> tuple[int, dict[str, Any], str]:
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", body, method="POST")
    try:
        with urllib.request.urlopen(req, context=UNVERIFIED, timeout=5) as resp:
            return resp.status, json.loads(resp.read()), resp.headers.get("Retry-After") or ""
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers.get("Retry-After") or ""


def test_a_replica_that_does_not_lead_answers_503_with_retry_after(endpoint: ProgressEndpoint) -> None:
    code, body, retry = post(endpoint.port)
    assert (code, body["accepted"], retry) == (503, False, "2")
    assert post(endpoint.port, "/other")[0] == 404
    samples = {
        s.labels["result"]: s.value
        for m in endpoint.reports.collect()
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert samples == {"503": 1.0, "404": 1.0}


def test_a_silent_client_holds_nobody_up(endpoint: ProgressEndpoint) -> None:
    with socket.create_connection(("127.0.0.1", endpoint.port)):  # connects, never says hello
        started = time.monotonic()
        assert post(endpoint.port)[0] == 503
        assert time.monotonic() - started < 3


def test_the_self_signed_certificate_is_made_without_loading_cryptography_here() -> None:
    """`cryptography` costs ~14 MiB of RSS: a child process makes the certificate (tls.py)."""
    probe = (
        "import sys; from controller.progress.tls import server_context; server_context(None); "
        "assert 'cryptography' not in sys.modules, 'cryptography was imported'"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
