"""API request paths: every segment escaped in one place (`controller.meta.api_path`), so a name
taken from an object — an owner reference, a label, a user's argument — is one segment on the
wire and never climbs out of its resource's path, adds a query or reaches another object."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.meta import InvalidPathSegmentError, Resource, api_path, group_version_path, path_segment
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.config import ClusterConfig
from controller.rest.discovery import Discovery
from controller.rest.request import Request
from controller.rest.resources import JOBS, NODES, PODS

CONTROLLER = Path(__file__).resolve().parents[2] / "controller"
TORCHRUNJOBS = Resource("torchrun.ai", "v1alpha1", "torchrunjobs", "TorchrunJob")
POISON = "../../../api/v1/namespaces/kube-system/secrets/x"


def test_ordinary_names_are_unchanged() -> None:
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert TORCHRUNJOBS.path("ns", "a.b-c") == "/apis/torchrun.ai/v1alpha1/namespaces/ns/torchrunjobs/a.b-c"
    assert JOBS.path() == "/apis/batch/v1/jobs"
    assert NODES.path("ignored", "n1") == "/api/v1/nodes/n1"


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("x?watch=true", "x%3Fwatch%3Dtrue"),  # no query smuggled in
        ("x#f", "x%23f"),
        ("50%", "50%25"),  # a literal percent stays literal
        ("a b", "a%20b"),
        ("é", "%C3%A9"),
        ("...", "..."),  # not a dot-segment: a name like any other
        ("x..y", "x..y"),
    ],
)
def test_a_segment_is_percent_encoded_whole(value: str, escaped: str) -> None:
    assert path_segment(value) == escaped


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", POISON, "x/status"])
def test_what_no_escaping_makes_one_segment_is_refused(value: str) -> None:
    # "", "." and ".." mean the collection, here and up; the API server decodes %2F back to "/"
    with pytest.raises(InvalidPathSegmentError):
        path_segment(value)


def test_every_segment_of_a_resource_path_is_escaped() -> None:
    assert PODS.path("n s", "p?x", "log#") == "/api/v1/namespaces/n%20s/pods/p%3Fx/log%23"
    for namespace, name, subresource in [
        ("..", "p", None),
        ("ns", POISON, None),
        ("ns", "p", "../../secrets"),
        ("kube-system/secrets", "p", None),
        ("ns", "", None),  # a named request without a name is not a list
    ]:
        with pytest.raises(InvalidPathSegmentError):
            TORCHRUNJOBS.path(namespace, name, subresource)


def test_group_version_paths() -> None:
    assert group_version_path("v1") == "/api/v1"
    assert group_version_path("batch/v1") == "/apis/batch/v1"
    assert group_version_path("we ird/v1") == "/apis/we%20ird/v1"
    assert api_path("apis", "a?b") == "/apis/a%3Fb"
    with pytest.raises(InvalidPathSegmentError):
        group_version_path("../v1")


class RecordingClient(RESTClient):
    """Keeps each request it is asked to send, answers `{}`."""

    def __init__(self) -> None:
        super().__init__(ClusterConfig(host="https://h"), metrics=ControllerMetrics())
        self.sent: list[Request] = []

    def do(self, req: Request) -> dict[str, Any]:
        self.sent.append(req)
        return {}


NAMED = {"metadata": {"name": "a?b", "namespace": "n#s"}}
VERBS: list[tuple[Callable[[RESTClient], object], str]] = [
    (lambda c: c.get(PODS, "a?b", "n#s"), "/api/v1/namespaces/n%23s/pods/a%3Fb"),
    (lambda c: c.update(PODS, dict(NAMED)), "/api/v1/namespaces/n%23s/pods/a%3Fb"),
    (lambda c: c.patch(PODS, "a?b", {}, "n#s"), "/api/v1/namespaces/n%23s/pods/a%3Fb"),
    (lambda c: c.delete(PODS, "a?b", "n#s"), "/api/v1/namespaces/n%23s/pods/a%3Fb"),
    (lambda c: c.evict(PODS, "a?b", "n#s"), "/api/v1/namespaces/n%23s/pods/a%3Fb/eviction"),
    (lambda c: c.list(PODS, "n#s"), "/api/v1/namespaces/n%23s/pods"),
    (lambda c: Discovery(c).served("we?rd/v1"), "/apis/we%3Frd/v1"),
]


@pytest.mark.parametrize(("call", "path"), VERBS)
def test_every_verb_sends_the_escaped_path(call: Callable[[RESTClient], object], path: str) -> None:
    client = RecordingClient()
    call(client)
    assert [r.path for r in client.sent] == [path]


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.get(TORCHRUNJOBS, POISON, "ns"),
        lambda c: c.delete(PODS, "..", "ns"),
        lambda c: c.patch(PODS, "p", {}, "ns", subresource="../../../nodes/n"),
    ],
)
def test_a_name_that_would_leave_its_path_is_never_sent(call: Callable[[RESTClient], object]) -> None:
    client = RecordingClient()
    with pytest.raises(InvalidPathSegmentError):
        call(client)
    assert client.sent == []


def _docstrings(tree: ast.AST) -> set[int]:
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, owners) and n.body and isinstance(n.body[0], ast.Expr)
    }


def _builds_api_path(text: str) -> bool:
    """A literal that starts an API path (`/api/...`, `/apis/...`) or names a namespace in one."""
    return text.split("/")[:2] in (["", "api"], ["", "apis"]) or "/namespaces/" in text


def test_no_module_but_meta_builds_an_api_path_from_strings() -> None:
    # string constants, f-strings' fixed parts included; docstrings may describe paths
    found = []
    for source in sorted(CONTROLLER.rglob("*.py")):
        if source == CONTROLLER / "meta.py":
            continue
        tree = ast.parse(source.read_text(), str(source))
        skip = _docstrings(tree)
        literals = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in skip]
        for node in literals:
            if isinstance(node.value, str) and _builds_api_path(node.value):
                found.append(f"{source.relative_to(CONTROLLER.parent)}:{node.lineno}")
    assert found == [], "build API paths with controller.meta (Resource.path, api_path): " + ", ".join(found)
