"""Store, indexer, frozen objects and the informer's event logic (fed directly, no API server)."""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

import pytest
from testbed import wait_until

from controller.cache import (
    DeletedFinalStateUnknown,
    FrozenDict,
    Indexer,
    SharedInformerFactory,
    freeze,
    thaw,
)
from controller.cache.frozen import INTERN_MAX
from controller.cache.informer import FuncHandler, SharedIndexInformer
from controller.cache.store import OWNER_INDEX, controller_owner_index, split_key
from controller.cache.transforms import slim_pod, strip_managed_fields
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.config import ClusterConfig
from controller.rest.resources import PODS


def pod(name: str, ns: str = "ns", rv: str = "1", owner: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"kind": "Job", "name": owner, "uid": "u", "controller": True}]
    meta["managedFields"] = [{"manager": "kubectl"}]
    return {"metadata": meta, "spec": {"containers": [{"name": "c"}]}}


class TestFrozen:
    def test_mutation_raises_everywhere(self) -> None:
        obj = freeze(pod("a"))
        with pytest.raises(TypeError):
            obj["spec"] = {}
        with pytest.raises(TypeError):
            obj["metadata"]["labels"].update({"x": "y"})
        with pytest.raises(AttributeError):
            obj["spec"]["containers"].append({})  # lists become tuples

    def test_thaw_is_a_private_mutable_copy(self) -> None:
        obj = freeze(pod("a"))
        mine = thaw(obj)
        mine["metadata"]["labels"]["x"] = "y"
        mine["spec"]["containers"].append({"name": "d"})
        assert "x" not in obj["metadata"]["labels"]
        assert len(obj["spec"]["containers"]) == 1
        deep = copy.deepcopy(obj)
        assert type(deep) is dict and type(deep["spec"]["containers"]) is list
        assert deep == thaw(obj)

    def test_short_values_are_shared_between_objects_and_long_ones_kept_equal(self) -> None:
        # decoded separately, as two objects from the API server are: equal, not the same strings
        a, b = (freeze(json.loads(json.dumps(pod(n, ns="team-a-namespace", queue="a100")))) for n in "ab")
        assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
        assert a["metadata"]["labels"]["queue"] is b["metadata"]["labels"]["queue"]
        long_a, long_b = (freeze(json.loads(json.dumps({"m": "x" * (INTERN_MAX + 1)}))) for _ in "ab")
        assert long_a == long_b and long_a["m"] is not long_b["m"]

    def test_frozen_serialises_like_the_original(self) -> None:
        raw = pod("a")
        assert json.loads(json.dumps(freeze(raw))) == raw
        assert isinstance(freeze(raw), FrozenDict)


class TestIndexer:
    def test_keys_and_indexes(self) -> None:
        idx = Indexer()
        idx.add(freeze(pod("a", owner="j1")))
        idx.add(freeze(pod("b", owner="j1")))
        idx.add(freeze(pod("c", ns="other")))
        assert sorted(idx.list_keys()) == ["ns/a", "ns/b", "other/c"]
        assert [o["metadata"]["name"] for o in idx.by_index("namespace", "other")] == ["c"]
        assert idx.index_keys(OWNER_INDEX, "Job/ns/j1") == ["ns/a", "ns/b"]
        idx.update(freeze(pod("a", owner="j2")))
        assert idx.index_keys(OWNER_INDEX, "Job/ns/j1") == ["ns/b"]
        assert idx.index_keys(OWNER_INDEX, "Job/ns/j2") == ["ns/a"]
        idx.delete("ns/b")
        assert idx.index_keys(OWNER_INDEX, "Job/ns/j1") == []
        assert "Job/ns/j1" not in idx._indices[OWNER_INDEX]  # no empty entry left behind

    def test_replace_rebuilds_indexes_and_returns_old(self) -> None:
        idx = Indexer()
        idx.add(freeze(pod("a", owner="j1")))
        old = idx.replace([freeze(pod("b", owner="j1"))])
        assert list(old) == ["ns/a"]
        assert idx.index_keys(OWNER_INDEX, "Job/ns/j1") == ["ns/b"]

    def test_late_indexer_covers_existing_objects(self) -> None:
        idx = Indexer()
        idx.add(freeze(pod("a", app="x")))
        idx.add_indexers({"app": lambda o: [o["metadata"]["labels"].get("app", "")]})
        assert idx.index_keys("app", "x") == ["ns/a"]
        with pytest.raises(ValueError):
            idx.add_indexers({"app": lambda o: []})
        with pytest.raises(KeyError):
            idx.by_index("nope", "x")

    def test_cluster_scoped_keys(self) -> None:
        assert split_key("ns/a") == ("ns", "a")
        assert split_key("node-1") == (None, "node-1")
        idx = Indexer()
        idx.add(freeze({"metadata": {"name": "node-1"}}))
        assert idx.get_by_key("node-1") is not None
        assert controller_owner_index({"metadata": {"name": "x"}}) == []


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def handler(self) -> FuncHandler:
        return FuncHandler(
            add=lambda o, initial: self._rec("initial" if initial else "add", o["metadata"]["name"]),
            update=lambda old, new: self._rec(
                "update", (old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"])
            ),
            delete=lambda o: self._rec(
                "tombstone" if isinstance(o, DeletedFinalStateUnknown) else "delete",
                o.key if isinstance(o, DeletedFinalStateUnknown) else o["metadata"]["name"],
            ),
        )

    def _rec(self, kind: str, what: Any) -> None:
        with self.lock:
            self.events.append((kind, what))


def make_informer(resync: float = 0.0) -> SharedIndexInformer:
    # The informer is driven through its reflector-sink methods; no API server is contacted.
    cfg = ClusterConfig(host="http://127.0.0.1:9")
    rest = RESTClient(cfg, metrics=ControllerMetrics())
    return SharedIndexInformer(rest, PODS, resync_period=resync)


class TestInformerEvents:
    def test_initial_list_then_events_in_order_with_tombstones_after_relist(self) -> None:
        inf = make_informer()
        rec = Recorder()
        inf.add_event_handler(rec.handler())
        assert not inf.has_synced()
        inf.replace([pod("a"), pod("b")], "10")
        wait_until(inf.has_synced, 5, message="synced")
        inf.add(pod("c", rv="11"))
        inf.update(pod("a", rv="12"))
        inf.delete(pod("c", rv="13"))
        # a relist after a watch gap: b vanished, a changed, d appeared
        inf.replace([pod("a", rv="14"), pod("d", rv="15")], "15")
        expected = [
            ("initial", "a"),
            ("initial", "b"),
            ("add", "c"),
            ("update", ("1", "12")),
            ("delete", "c"),
            ("update", ("12", "14")),
            ("add", "d"),
            ("tombstone", "ns/b"),
        ]
        wait_until(lambda: len(rec.events) == len(expected), 5, message="all events")
        assert rec.events == expected
        assert sorted(inf.indexer.list_keys()) == ["ns/a", "ns/d"]

    def test_delete_handler_gets_the_deleted_events_final_state(self) -> None:
        inf = make_informer()
        got: list[Any] = []
        inf.add_event_handler(FuncHandler(delete=got.append))
        inf.replace([pod("a", rv="1", phase="running")], "1")
        final = pod("a", rv="9", phase="gone")  # e.g. the last status written before deletion
        inf.delete(final)
        wait_until(lambda: got, 5, message="delete event")
        assert got[0]["metadata"]["resourceVersion"] == "9"
        assert got[0]["metadata"]["labels"] == {"phase": "gone"}
        assert "managedFields" not in got[0]["metadata"]  # transformed and frozen like the cache
        assert isinstance(got[0], FrozenDict)
        assert inf.get("ns/a") is None

    def test_delete_of_an_object_never_cached_is_not_reported(self) -> None:
        # client-go's DeltaFIFO drops it: already reported by a relist's tombstone, or never seen
        inf = make_informer()
        rec = Recorder()
        inf.add_event_handler(rec.handler())
        inf.replace([], "1")
        inf.delete(pod("ghost", rv="2"))
        inf.add(pod("b", rv="3"))
        wait_until(lambda: ("add", "b") in rec.events, 5, message="add of b")
        assert rec.events == [("add", "b")]

    def test_cache_is_frozen_and_transformed(self) -> None:
        inf = make_informer()
        inf.replace([pod("a")], "1")
        cached = inf.get("ns/a")
        assert cached is not None
        assert "managedFields" not in cached["metadata"]
        with pytest.raises(TypeError):
            cached["metadata"]["labels"]["x"] = "y"  # type: ignore[index]

    def test_late_handler_gets_synthetic_adds(self) -> None:
        inf = make_informer()
        inf.replace([pod("a"), pod("b")], "1")
        rec = Recorder()
        listener = inf.add_event_handler(rec.handler())
        wait_until(listener.has_synced, 5, message="late handler synced")
        assert sorted(rec.events) == [("initial", "a"), ("initial", "b")]

    def test_resync_replays_cache_without_api(self) -> None:
        inf = make_informer(resync=0.2)
        rec = Recorder()
        inf.add_event_handler(rec.handler())
        inf.replace([pod("a", rv="7")], "7")
        inf.run()
        try:
            wait_until(lambda: ("update", ("7", "7")) in rec.events, 5, message="resync update")
        finally:
            inf.shutdown(timeout=1)

    def test_slow_handler_does_not_block_another(self) -> None:
        inf = make_informer()
        gate = threading.Event()
        fast = Recorder()
        inf.add_event_handler(FuncHandler(add=lambda o, i: gate.wait(5)))
        inf.add_event_handler(fast.handler())
        inf.replace([], "1")
        for i in range(20):
            inf.add(pod(f"p{i}"))
        wait_until(lambda: len(fast.events) == 20, 5, message="fast handler got every event")
        gate.set()

    def test_strip_managed_fields(self) -> None:
        obj = pod("a")
        obj["metadata"]["annotations"] = {
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "keep": "1",
        }
        out = strip_managed_fields(obj)
        assert "managedFields" not in out["metadata"]
        assert out["metadata"]["annotations"] == {"keep": "1"}


def test_slim_pod_keeps_what_controllers_read() -> None:
    raw = pod("a", owner="j")
    raw["metadata"]["annotations"] = {
        "batch.kubernetes.io/job-completion-index": "1",
        "torchrun.ai/restart": "2",
        "torchrun.ai/workspace-generation": "3",
        "big": "x" * 1000,
    }
    raw["spec"] = {
        "nodeName": "n1",
        "containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}],
        "schedulingGates": [{"name": "kueue.x-k8s.io/elastic-job"}],  # a growth Kueue holds
    }
    raw["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "m",
                "lastProbeTime": None,
            }
        ],
        "containerStatuses": [
            {
                "name": "c",
                "ready": False,
                "restartCount": 0,
                "image": "i",
                "imageID": "x",
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
        ],
    }
    slim = slim_pod(raw)
    assert slim["metadata"]["ownerReferences"] == raw["metadata"]["ownerReferences"]
    assert slim["metadata"]["annotations"] == {
        "batch.kubernetes.io/job-completion-index": "1",
        "torchrun.ai/restart": "2",  # a managed etcd pod's restart (restart_of)
        "torchrun.ai/workspace-generation": "3",  # a sync pod's generation
    }
    assert "managedFields" not in slim["metadata"]
    assert slim["spec"] == {"nodeName": "n1", "schedulingGates": [{"name": "kueue.x-k8s.io/elastic-job"}]}
    assert slim["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}
    ]
    assert slim["status"]["containerStatuses"] == [
        {
            "name": "c",
            "ready": False,
            "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}},
        }
    ]


class TestFactoryRegistration:
    def factory(self) -> SharedInformerFactory:
        cfg = ClusterConfig(host="http://127.0.0.1:9")
        return SharedInformerFactory(RESTClient(cfg, metrics=ControllerMetrics()), namespace="ns")

    def test_compatible_registrations_share_one_informer(self) -> None:
        f = self.factory()
        pods = f.informer_for(PODS, label_selector="a", transform=slim_pod)
        assert f.informer_for(PODS, label_selector="a") is pods  # no transform: takes the shared one
        assert f.informer_for(PODS, label_selector="a", transform=slim_pod) is pods
        assert f.informer_for(PODS, label_selector="b") is not pods  # another selector, another cache
        assert pods.transform is slim_pod

    def test_a_conflicting_transform_is_an_error(self) -> None:
        f = self.factory()
        f.informer_for(PODS)  # the factory's default transform
        with pytest.raises(ValueError, match="pods"):
            f.informer_for(PODS, transform=slim_pod)

    def test_a_conflicting_indexer_is_an_error_and_new_ones_are_added(self) -> None:
        f = self.factory()

        def by_app(o: Any) -> list[str]:
            return [o["metadata"]["labels"].get("app", "")]

        pods = f.informer_for(PODS, indexers={"app": by_app})
        assert f.informer_for(PODS, indexers={"app": by_app}) is pods
        f.informer_for(PODS, indexers={"node": lambda o: []})
        assert {"app", "node"} <= set(pods.indexer.index_names())
        with pytest.raises(ValueError, match="pods"):
            f.informer_for(PODS, indexers={"app": lambda o: []})
