"""crd/ is generated from the Python types, is up to date, and agrees with them; samples are valid."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.api import TorchrunJob, TorchrunQueue, to_json, validate_job, validate_queue
from controller.api.crds import crd_manifests, render

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "config" / "samples").glob("*.yaml"))
CRDS = crd_manifests()


def load_samples() -> list[dict[str, Any]]:
    return [doc for path in SAMPLES for doc in yaml.safe_load_all(path.read_text()) if doc]


def crd_schema(kind: str) -> dict[str, Any]:
    crd = next(c for c in CRDS.values() if c["spec"]["names"]["kind"] == kind)
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from walk(prop, f"{path}.{name}")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")


@pytest.mark.parametrize("name", sorted(CRDS))
def test_committed_crd_is_up_to_date(name: str) -> None:
    path = REPO / "crd" / name
    assert path.exists(), f"crd/{name} is missing: run hack/gen-crds.py"
    assert path.read_text() == render(CRDS[name]), f"crd/{name} is stale: run hack/gen-crds.py"


def test_crd_directory_holds_only_generated_files() -> None:
    assert sorted(p.name for p in (REPO / "crd").iterdir()) == sorted(CRDS)


@pytest.mark.parametrize("kind", ["TorchrunQueue", "TorchrunJob"])
def test_every_field_is_described_and_typed(kind: str) -> None:
    for path, node in walk(crd_schema(kind)):
        if path in (".metadata", ".spec.scheduling.affinity"):
            continue
        assert node.get("type") or node.get("x-kubernetes-int-or-string"), f"{kind}{path} has no type"
        if not path.endswith("[]") and path.count(".") >= 1:
            assert node.get("description"), f"{kind}{path} has no description"


@pytest.mark.parametrize("kind", ["TorchrunQueue", "TorchrunJob"])
def test_every_list_is_bounded_for_cel_cost(kind: str) -> None:
    for path, node in walk(crd_schema(kind)):
        if node.get("type") == "array":
            assert "maxItems" in node, f"{kind}{path} needs maxItems"


def test_names_scope_subresource_and_columns() -> None:
    queue, job = (CRDS["torchrun.ai_torchrunqueues.yaml"], CRDS["torchrun.ai_torchrunjobs.yaml"])
    assert queue["spec"]["scope"] == "Cluster"
    assert job["spec"]["scope"] == "Namespaced"
    for crd, short in ((queue, "tq"), (job, "tj")):
        assert crd["spec"]["group"] == "torchrun.ai"
        assert crd["spec"]["names"]["shortNames"] == [short]
        assert crd["spec"]["names"]["categories"] == ["torchrun"]
        version = crd["spec"]["versions"][0]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert version["subresources"] == {"status": {}}

    def columns(crd: dict[str, Any]) -> list[str]:
        cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        return [c["name"] for c in cols if not c.get("priority")]

    assert columns(queue) == ["GPUs/node", "Scheduler", "Ready", "Jobs", "Age"]
    assert columns(job) == ["Queue", "Nodes", "GPUs", "Phase", "Restarts", "Progress", "Goodput", "Age"]


def test_samples_cover_the_promised_cases() -> None:
    docs = load_samples()
    queues = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "TorchrunQueue"}
    jobs = [d["spec"] for d in docs if d["kind"] == "TorchrunJob"]
    schedulers = {q.get("scheduling", {}).get("scheduler") for q in queues.values()}
    assert {"kai-scheduler", "kueue"} <= schedulers
    assert any(j.get("numNodes") == 1 for j in jobs)
    assert any(j.get("numNodes", 0) > 1 and "elastic" not in j for j in jobs)
    assert any("numGPUs" in j for j in jobs)
    assert any("elastic" in j for j in jobs)
    assert any(j.get("workspace", {}).get("source") == "git" for j in jobs)
    assert any(j.get("suspend") for j in jobs)
    assert any("overrides" in j for j in jobs)


def test_samples_parse_and_pass_controller_validation() -> None:
    docs = load_samples()
    queues = {d["metadata"]["name"]: TorchrunQueue.from_json(d) for d in docs if d["kind"] == "TorchrunQueue"}
    for q in queues.values():
        assert validate_queue(q) == [], q.name
    for doc in docs:
        if doc["kind"] == "TorchrunJob":
            j = TorchrunJob.from_json(doc)
            assert validate_job(j, queues[j.spec.job_queue]) == [], j.name


def apply_server_defaults(value: Any, schema: dict[str, Any]) -> None:
    """What the API server's structural defaulting does: set absent defaulted fields, recurse."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name, prop in props.items():
            if "default" in prop and name not in value:
                value[name] = copy.deepcopy(prop["default"])
        for name, child in value.items():
            if name in props:
                apply_server_defaults(child, props[name])
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            apply_server_defaults(item, schema["items"])


def present_paths(value: Any, path: str = "") -> set[str]:
    """JSON paths holding a non-empty value (absent and empty mean the same to the types)."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in present_paths(v, f"{path}.{k}")} or (
            {path} if value else set()
        )
    if isinstance(value, list):
        return {p for i, v in enumerate(value) for p in present_paths(v, f"{path}[{i}]")}
    return {path}


MINIMAL = [
    {"kind": "TorchrunQueue", "spec": {"nodeResources": {"gpus": 8}, "image": "i"}},
    {"kind": "TorchrunJob", "spec": {"jobQueue": "q", "numNodes": 1, "command": "c"}},
    {
        "kind": "TorchrunQueue",
        "spec": {
            "nodeResources": {"gpus": 0},
            "image": "i",
            "storage": {"datasets": {"claimName": "d"}},
            "scheduling": {"scheduler": "kai-scheduler"},
            "quota": {"gpu": {}},
        },
    },
    {
        "kind": "TorchrunJob",
        "spec": {"jobQueue": "q", "numNodes": 1, "command": "c", "elastic": {"minNodes": 1, "maxNodes": 2}},
    },
]


@pytest.mark.parametrize(
    "doc", load_samples() + MINIMAL, ids=lambda d: d.get("metadata", {}).get("name", d["kind"])
)
def test_server_defaults_are_the_python_defaults(doc: dict[str, Any]) -> None:
    kind = TorchrunQueue if doc["kind"] == "TorchrunQueue" else TorchrunJob
    defaulted = copy.deepcopy(doc)
    apply_server_defaults(defaulted["spec"], crd_schema(doc["kind"])["properties"]["spec"])
    parsed = kind.from_json(doc)
    # the server's defaults change nothing the types would not have filled in themselves ...
    assert kind.from_json(defaulted).spec == parsed.spec
    # ... and the types fill in nothing the server does not write
    assert present_paths(to_json(parsed.spec)) == present_paths(defaulted["spec"])
