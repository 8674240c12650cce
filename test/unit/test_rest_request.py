"""rest/request.py: how one request is encoded, how long a retry waits, and what the sender does
before and around each attempt (the fence, the attempt budget, the metrics) — against a local
address that refuses connections, so every attempt fails at once without a server. The retry
decision and the status handling against a misbehaving server are in test_rest_client.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import urllib3

from controller.metrics.registry import ControllerMetrics
from controller.rest.config import ClusterConfig
from controller.rest.errors import ApiError, LeadershipLostError
from controller.rest.request import MAX_RETRY_AFTER, Request, RequestSender, retry_delay


def test_a_request_drops_unset_query_values_and_sends_compact_json() -> None:
    req = Request(
        "list", "GET", "/api/v1/pods", params={"labelSelector": "a=b", "limit": None, "continue": None}
    )
    assert req.url("https://h:6443") == "https://h:6443/api/v1/pods?labelSelector=a%3Db"
    assert Request("get", "GET", "/x").url("https://h") == "https://h/x"
    post = Request("create", "POST", "/x", body={"a": [1, 2]})
    assert (post.data(), post.content_type_header()) == (b'{"a":[1,2]}', "application/json")
    patch = Request("patch", "PATCH", "/x", body={}, content_type="application/merge-patch+json")
    assert patch.content_type_header() == "application/merge-patch+json"
    assert (Request("get", "GET", "/x").data(), Request("get", "GET", "/x").content_type_header()) == (
        None,
        None,
    )


def test_retry_after_is_honoured_up_to_a_cap_and_backoff_is_jittered_exponential() -> None:
    assert retry_delay(ApiError(429, {}, retry_after=3), attempt=1) == 3
    assert retry_delay(ApiError(503, {}, retry_after=3600), attempt=1) == MAX_RETRY_AFTER
    for attempt, base in ((1, 0.1), (2, 0.2), (3, 0.4), (10, 5.0)):
        delays = [retry_delay(ConnectionResetError(), attempt) for _ in range(200)]
        assert all(base <= d < 2 * base for d in delays)
        assert max(delays) - min(delays) > base / 4  # jittered, not a constant


@pytest.fixture
def refusing() -> Iterator[str]:
    """A local address that refuses every connection: bound, never listening, and held for the
    test so nothing else can take it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def sender(host: str, fence_open: bool | None = None, max_attempts: int = 3) -> RequestSender:
    cfg = ClusterConfig(host=host)
    fence = None if fence_open is None else (lambda: fence_open)
    return RequestSender(cfg, metrics=ControllerMetrics(), max_attempts=max_attempts, write_fence=fence)


def count(s: RequestSender, metric: str, **labels: str) -> float:
    return s.metrics.registry.get_sample_value(metric, labels) or 0.0


def test_a_closed_fence_refuses_writes_before_anything_is_sent(refusing: str) -> None:
    s = sender(refusing, fence_open=False)
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(LeadershipLostError):
            s.do(Request("create", method, "/api/v1/namespaces/ns/pods", "pods", body={}))
    assert count(s, "rest_client_requests_total", verb="create", resource="pods", code="<error>") == 0
    with pytest.raises(urllib3.exceptions.HTTPError):  # a read is sent: the fence is for writes
        s.do(Request("get", "GET", "/api/v1/namespaces/ns/pods/p", "pods", attempts=1))
    unfenced = Request(
        "update", "PUT", "/apis/coordination.k8s.io/v1/leases/l", "leases", body={}, fenced=False
    )
    with pytest.raises(urllib3.exceptions.HTTPError):  # the elector's own Lease write
        s.do(unfenced)


def test_a_failed_read_is_tried_the_budget_and_every_attempt_is_counted(refusing: str) -> None:
    s = sender(refusing, max_attempts=3)
    with pytest.raises(urllib3.exceptions.HTTPError):
        s.do(Request("get", "GET", "/api/v1/pods", "pods"))
    assert count(s, "rest_client_requests_total", verb="get", resource="pods", code="<error>") == 3
    assert count(s, "rest_client_retries_total", verb="get", resource="pods") == 2
    assert count(s, "rest_client_request_duration_seconds_count", verb="get", resource="pods") == 3
    assert count(s, "rest_client_rate_limiter_duration_seconds_count", verb="get") == 3


def test_a_failed_write_is_sent_once_and_a_request_may_lower_the_budget(refusing: str) -> None:
    s = sender(refusing, max_attempts=3)
    with pytest.raises(urllib3.exceptions.HTTPError):
        s.do(Request("create", "POST", "/api/v1/pods", "pods", body={}))
    with pytest.raises(urllib3.exceptions.HTTPError):
        s.do(Request("get", "GET", "/api/v1/pods", "pods", attempts=1))
    assert count(s, "rest_client_requests_total", verb="create", resource="pods", code="<error>") == 1
    assert count(s, "rest_client_requests_total", verb="get", resource="pods", code="<error>") == 1
    assert count(s, "rest_client_retries_total", verb="get", resource="pods") == 0
