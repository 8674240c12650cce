"""The test bed's own promises, checked without a control plane: `Cluster.delete_namespace`
fails loudly, naming what is left, when pods still hold nodes after its timeout."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from testbed import Cluster, _logs_query, manifest_text

STUCK_POD = {
    "metadata": {"name": "worker-0", "deletionTimestamp": "2025-01-01T00:00:00Z"},
    "spec": {"nodeName": "gpu-node-1"},
    "status": {"phase": "Running"},
}


class FakeClient:
    """A client of an API server that deletes nothing and always lists `pods`."""

    def __init__(self, pods: list[dict[str, object]]) -> None:
        self.pods = pods

    def delete(self, *args: object, **kwargs: object) -> dict[str, object]:
        return {}

    def list(self, *args: object, **kwargs: object) -> dict[str, object]:
        return {"items": self.pods}

    def request(self, *args: object, **kwargs: object) -> dict[str, object]:
        return {}


@dataclass
class StuckCluster(Cluster):
    """A Cluster whose in-process client is a `FakeClient` listing `pods`."""

    pods: list[dict[str, object]] = field(default_factory=list)

    def api(self) -> Any:
        return SimpleNamespace(client=FakeClient(self.pods))


def cluster(tmp_path: Path, pods: list[dict[str, object]]) -> Cluster:
    return StuckCluster(
        run_dir=tmp_path, kubeconfig=tmp_path / "kubeconfig", kubectl_path=tmp_path / "kubectl", pods=pods
    )


def test_delete_namespace_fails_naming_the_pods_still_on_nodes_after_its_timeout(tmp_path: Path) -> None:
    with pytest.raises(AssertionError) as failed:
        cluster(tmp_path, [STUCK_POD]).delete_namespace("t-leaky", timeout=0.5)
    assert str(failed.value) == (
        "namespace t-leaky: pods still hold nodes after 0.5s: "
        "['worker-0 on gpu-node-1 (Running, being deleted)']"
    )


def test_delete_namespace_returns_once_no_pod_holds_a_node(tmp_path: Path) -> None:
    unbound = {**STUCK_POD, "spec": {}}  # being deleted, never bound: the API server never binds it
    cluster(tmp_path, [unbound]).delete_namespace("t-clean", timeout=0.5)


def test_manifests_reach_kubectl_with_every_string_a_string() -> None:
    # strings YAML 1.2 (kubectl) would read as numbers or booleans when written unquoted
    tricky = {"metadata": {"labels": {"pool": "7179e0", "n": "0x1f", "yes": "on", "v": "1e3"}}}
    docs = manifest_text([tricky, {"kind": "B"}]).split("\n---\n")
    assert [json.loads(d) for d in docs] == [tricky, {"kind": "B"}]


def test_logs_are_read_in_process_only_for_the_arguments_it_knows() -> None:
    assert _logs_query(("--timestamps", "-n", "ns", "w-0", "-c", "torchrun", "--tail=20", "-p")) == (
        "ns",
        "w-0",
        {"container": "torchrun", "timestamps": "true", "tailLines": "20", "previous": "true"},
    )
    # kubectl's own: no container (its default-container annotation), a flag not known here, two pods
    assert _logs_query(("-n", "ns", "w-0")) is None
    assert _logs_query(("-n", "ns", "w-0", "-c", "x", "-f")) is None
    assert _logs_query(("-n", "ns", "w-0", "w-1", "-c", "x")) is None
    assert _logs_query(("-n", "ns", "w-0", "-c", "x", "--tail=-1")) is None
