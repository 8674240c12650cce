"""test/kubeget.py answers `kubectl get -o json` as kubectl does, on the real control plane: the
same objects for every form the tests use (names, short names, kinds, `resource.group`, a
cluster-scoped type with `-n`, selectors, all namespaces), kubectl's words for a missing object,
and None (kubectl then runs) for what it does not understand."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from kubeget import Args, KubeGet
from testbed import Cluster

from controller.rest import RESTClient, load_config


def by_kubectl(cluster: Cluster, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return out


def identities(got: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    items = got["items"] if got.get("kind") == "List" else [got]
    return sorted(
        (i["apiVersion"], i["kind"], i["metadata"].get("namespace", ""), i["metadata"]["name"]) for i in items
    )


@pytest.mark.parametrize(
    "args",
    [
        ("nodes",),
        ("node", "gpu-node-0"),
        ("no", "-l", "type=kwok"),
        ("Node",),
        ("namespaces", "kube-system", "-n", "default"),  # cluster-scoped: the namespace is ignored
        ("serviceaccounts", "-n", "kube-system", "--field-selector", "metadata.name=default"),
        ("sa", "-A"),
        ("storageclass.storage.k8s.io",),
        ("crd",),
        ("customresourcedefinitions", "torchrunjobs.torchrun.ai"),
        ("tq",),
        ("leases", "-n", "kube-node-lease"),
        ("lease/gpu-node-1", "-n", "kube-node-lease"),
        ("events", "-n", "kube-system"),
    ],
)
def test_it_answers_what_kubectl_answers(cluster: Cluster, crds: Path, args: tuple[str, ...]) -> None:
    got = KubeGet(cluster.kubeconfig)(args)
    assert got is not None, f"{args} not answered in process"
    assert identities(got) == identities(by_kubectl(cluster, *args))


def test_a_missing_object_fails_with_kubectls_words(cluster: Cluster) -> None:
    with pytest.raises(
        AssertionError, match=r'Error from server \(NotFound\): nodes "no-such-node" not found'
    ):
        KubeGet(cluster.kubeconfig)(("node", "no-such-node"))


@pytest.mark.parametrize(
    "args",
    [
        ("pods,services",),
        ("pods", "a", "b"),
        ("pods", "-o", "yaml"),
        ("pods", "--ignore-not-found"),
        ("no-such-type",),
    ],
)
def test_what_it_does_not_understand_is_left_to_kubectl(cluster: Cluster, args: tuple[str, ...]) -> None:
    assert KubeGet(cluster.kubeconfig)(args) is None


def test_arguments_are_read_as_kubectl_reads_them() -> None:
    parsed = Args(("pods", "-n", "ns", "-l=a=b", "--field-selector", "spec.nodeName=x", "-o", "json"))
    assert (parsed.ok, parsed.positional, parsed.namespace, parsed.label, parsed.field) == (
        True, ["pods"], "ns", "a=b", "spec.nodeName=x",
    )  # fmt: skip
    assert Args(("deployment/web", "--namespace=apps")).positional == ["deployment", "web"]
    assert not Args(()).ok and not Args(("pods", "-w")).ok and not Args(("pods", "")).ok


def test_a_server_that_is_down_fails_at_once_as_kubectl_does(cluster: Cluster) -> None:
    """A refused connection is an AssertionError (a `wait_until` reads it as "not yet"), raised
    without the retries the controller's client makes; with no discovery it is kubectl's to say."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"https://127.0.0.1:{s.getsockname()[1]}"
    get = KubeGet(cluster.kubeconfig)
    assert get.resource("nodes") is not None  # discovery read while the server was up
    get.client = RESTClient(dataclasses.replace(load_config(str(cluster.kubeconfig)), host=dead))
    started = time.monotonic()
    with pytest.raises(AssertionError, match="kubectl get nodes failed: "):
        get(("nodes",))
    assert time.monotonic() - started < 2
    unreachable = KubeGet(cluster.kubeconfig)
    unreachable.client = get.client
    assert unreachable(("nodes",)) is None
