"""One object cannot stop or steer the garbage collector: an owner reference naming what no
TorchrunJob can be called is passed over without a request, and an error on one object is logged,
counted in `torchrun_gc_errors_total{resource}` and the pass goes on. The client is the real
RESTClient (its real paths) with the sending replaced: it records each request and answers as an
API server would."""

from __future__ import annotations

from typing import Any

import pytest

from controller.cache import Indexer, Lister, freeze
from controller.gc.collector import GarbageCollector, is_dns_subdomain
from controller.meta import Resource
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.config import ClusterConfig
from controller.rest.errors import ApiError
from controller.rest.request import Request
from controller.rest.resources import PVCS, SERVICES

NS = "ns"
TORCHRUNJOBS = Resource("torchrun.ai", "v1alpha1", "torchrunjobs", "TorchrunJob")
POISON = "../../../api/v1/namespaces/kube-system/secrets/x"


class FakeServer(RESTClient):
    """No TorchrunJob exists; GETs of the names in `refused` are answered 403, every DELETE 200."""

    def __init__(self, refused: frozenset[str] = frozenset()) -> None:
        super().__init__(ClusterConfig(host="https://h"), metrics=ControllerMetrics())
        self.refused = refused
        self.sent: list[tuple[str, str]] = []

    def do(self, req: Request) -> dict[str, Any]:
        self.sent.append((req.method, req.path))
        if req.method == "GET":
            forbidden = req.path.rsplit("/", 1)[-1] in self.refused
            raise ApiError(403 if forbidden else 404, {"reason": "Forbidden" if forbidden else "NotFound"})
        return {}


def owned(name: str, owner: str, uid: str = "tj-gone") -> Any:
    ref = {"apiVersion": "torchrun.ai/v1alpha1", "kind": "TorchrunJob", "name": owner, "uid": uid}
    meta = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "ownerReferences": [{**ref, "controller": True}],
    }
    return freeze({"metadata": meta})


def lister(*objs: Any) -> Lister:
    idx = Indexer()
    for o in objs:
        idx.add(o)
    return Lister(idx)


def collector(client: FakeServer, owned_by: dict[Resource, Lister]) -> GarbageCollector:
    return GarbageCollector(client, lister(), TORCHRUNJOBS, owned_by, metrics=ControllerMetrics())


def errors(gc: GarbageCollector, resource: Resource) -> float:
    return float(
        gc.metrics.registry.get_sample_value("torchrun_gc_errors_total", {"resource": resource.plural}) or 0
    )


def deleted(client: FakeServer) -> list[str]:
    return sorted(path.rsplit("/", 1)[-1] for method, path in client.sent if method == "DELETE")


def test_an_error_on_one_object_is_counted_and_the_pass_goes_on() -> None:
    client = FakeServer(refused=frozenset({"forbidden"}))
    gc = collector(
        client,
        {
            SERVICES: lister(owned("a-first", "forbidden"), owned("b-orphan", "gone")),
            PVCS: lister(owned("c-orphan", "gone")),
        },
    )
    assert gc.collect() == 2
    assert deleted(client) == ["b-orphan", "c-orphan"]
    assert (errors(gc, SERVICES), errors(gc, PVCS)) == (1, 0)
    # every pass: the error is the object's, not the collector's
    assert gc.collect() == 2 and errors(gc, SERVICES) == 2


@pytest.mark.parametrize("poison", [POISON, "x?watch=true", "UPPER", "a_b", "-a", "a/status", "x" * 254, ""])
def test_an_owner_named_what_no_torchrunjob_can_be_called_is_passed_over_unasked(poison: str) -> None:
    client = FakeServer()
    gc = collector(client, {SERVICES: lister(owned("a-poisoned", poison), owned("b-orphan", "gone"))})
    assert gc.collect() == 1
    assert client.sent == [
        ("GET", TORCHRUNJOBS.path(NS, "gone")),
        ("DELETE", SERVICES.path(NS, "b-orphan")),
    ]
    assert errors(gc, SERVICES) == 0  # skipped by rule, not failed


@pytest.mark.parametrize("name", ["a", "0", "a-b", "a.b-c.d", "x" * 253, "a" * 63 + "." + "b" * 63])
def test_dns_subdomains(name: str) -> None:
    assert is_dns_subdomain(name)


@pytest.mark.parametrize(
    "name",
    ["", "A", "-a", "a-", "a..b", ".a", "a.", "a_b", "a b", "a/b", "..", "é", "a\n", "x" * 254, POISON],
)
def test_not_dns_subdomains(name: str) -> None:
    assert not is_dns_subdomain(name)
