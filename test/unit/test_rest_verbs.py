"""rest/client.py: each RESTClient verb is one `Request` — the method, path, query, body and
content type client-go would send — handed to the sender. A recording client answers `{}` and
keeps what it was asked to send; sending itself is test_rest_request.py's."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
import urllib3

from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.config import ClusterConfig
from controller.rest.request import Request
from controller.rest.resources import CONFIGMAPS, NODES, PODS

HOST = "https://h"
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}


class RecordingClient(RESTClient):
    def __init__(self) -> None:
        cfg = ClusterConfig(host=HOST)
        super().__init__(cfg, metrics=ControllerMetrics())
        self.sent: list[Request] = []

    def do(self, req: Request) -> dict[str, Any]:
        self.sent.append(req)
        return {}


Sent = tuple[str, str, str, Any, str | None]  # verb, method, URL, body, content type

VERBS: list[tuple[Callable[[RESTClient], object], Sent]] = [
    (lambda c: c.get(PODS, "p", "ns"), ("get", "GET", "/api/v1/namespaces/ns/pods/p", None, None)),
    (lambda c: c.get(NODES, "n"), ("get", "GET", "/api/v1/nodes/n", None, None)),
    (
        lambda c: c.get(PODS, "p", "ns", "log"),
        ("get", "GET", "/api/v1/namespaces/ns/pods/p/log", None, None),
    ),
    (
        lambda c: c.list(PODS, "ns", label_selector="a=b", limit=500, resource_version="7"),
        (
            "list",
            "GET",
            "/api/v1/namespaces/ns/pods?labelSelector=a%3Db&limit=500&resourceVersion=7",
            None,
            None,
        ),
    ),
    (  # a continued list carries the token, never a resourceVersion
        lambda c: c.list(PODS, continue_token="tok", resource_version="7"),
        ("list", "GET", "/api/v1/pods?continue=tok", None, None),
    ),
    (
        lambda c: c.create(CONFIGMAPS, CM),
        (
            "create",
            "POST",
            "/api/v1/namespaces/ns/configmaps?fieldManager=torchrun-controller",
            CM,
            "application/json",
        ),
    ),
    (
        lambda c: c.update(CONFIGMAPS, CM),
        (
            "update",
            "PUT",
            "/api/v1/namespaces/ns/configmaps/c?fieldManager=torchrun-controller",
            CM,
            "application/json",
        ),
    ),
    (
        lambda c: c.update_status(CONFIGMAPS, CM),
        (
            "update/status",
            "PUT",
            "/api/v1/namespaces/ns/configmaps/c/status?fieldManager=torchrun-controller",
            CM,
            "application/json",
        ),
    ),
    (
        lambda c: c.patch(PODS, "p", {"a": 1}, "ns"),
        (
            "patch",
            "PATCH",
            "/api/v1/namespaces/ns/pods/p?fieldManager=torchrun-controller",
            {"a": 1},
            "application/merge-patch+json",
        ),
    ),
    (
        lambda c: c.patch(PODS, "p", [], "ns", patch_type="json", subresource="status", field_manager="me"),
        (
            "patch/status",
            "PATCH",
            "/api/v1/namespaces/ns/pods/p/status?fieldManager=me",
            [],
            "application/json-patch+json",
        ),
    ),
    (
        lambda c: c.apply(CONFIGMAPS, CM),
        (
            "patch",
            "PATCH",
            "/api/v1/namespaces/ns/configmaps/c?fieldManager=torchrun-controller&force=true",
            CM,
            "application/apply-patch+yaml",
        ),
    ),
    (
        lambda c: c.delete(PODS, "p", "ns", grace_period_seconds=0, uid="u1"),
        (
            "delete",
            "DELETE",
            "/api/v1/namespaces/ns/pods/p",
            {
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "propagationPolicy": "Background",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": "u1"},
            },
            "application/json",
        ),
    ),
    (
        lambda c: c.evict(PODS, "p", "ns", uid="u1"),
        (
            "create/eviction",
            "POST",
            "/api/v1/namespaces/ns/pods/p/eviction",
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "p", "namespace": "ns"},
                "deleteOptions": {"preconditions": {"uid": "u1"}},
            },
            "application/json",
        ),
    ),
]


@pytest.mark.parametrize("call, sent", VERBS)
def test_each_verb_is_one_request(call: Callable[[RESTClient], object], sent: Sent) -> None:
    client = RecordingClient()
    call(client)
    assert len(client.sent) == 1
    req = client.sent[0]
    verb, method, url, body, content_type = sent
    assert (req.verb, req.method, req.url(HOST), req.body, req.content_type_header()) == (
        verb,
        method,
        HOST + url,
        body,
        content_type,
    )
    assert req.resource == (
        CONFIGMAPS.key if "configmaps" in url else PODS.key if "pods" in url else NODES.key
    )


def test_per_call_budget_timeout_and_fence_reach_the_request() -> None:
    client = RecordingClient()
    client.get(PODS, "p", "ns", attempts=1, timeout=2.0)
    client.create(CONFIGMAPS, CM, attempts=2, timeout=3.0, fenced=False)
    client.update(CONFIGMAPS, CM, fenced=False)
    assert [(r.attempts, r.timeout, r.fenced) for r in client.sent] == [
        (1, 2.0, True),
        (2, 3.0, False),
        (None, None, False),
    ]


def test_watch_is_one_streaming_request_with_the_watch_read_timeout() -> None:
    sent: list[tuple[Request, bool, float | None]] = []

    class Streaming(RecordingClient):
        def send(self, req: Request, *, stream: bool, read_timeout: float | None) -> urllib3.BaseHTTPResponse:
            sent.append((req, stream, read_timeout))
            return urllib3.HTTPResponse(body=io.BytesIO(b""), status=200, preload_content=False)

    client = Streaming()
    client.watch_read_timeout = 7.0
    events = list(client.watch(PODS, "ns", resource_version="5", label_selector="a=b"))
    assert events == []
    [(req, stream, read_timeout)] = sent
    assert (req.verb, req.method, req.resource, stream, read_timeout) == ("watch", "GET", PODS.key, True, 7.0)
    assert req.url(HOST) == (
        f"{HOST}/api/v1/namespaces/ns/pods?watch=true&resourceVersion=5&timeoutSeconds=300"
        "&allowWatchBookmarks=true&labelSelector=a%3Db"
    )
