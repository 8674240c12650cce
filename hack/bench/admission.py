"""What admitting a custom resource costs the API server, and which part of the CRD it comes from.

`kubectl create -f` of N objects (one request after another, as a user would) in a namespace no
controller watches, timed by the client (wall clock) and by the server (the audit log's
per-request time). The TorchrunJob is created as shipped (crd/) and through variants of its CRD,
each a copy of it in a group of its own (`<variant>.bench.torchrun.ai`), so all are served side by
side in the same run: without its CEL rules, without its defaults, without both, and with a schema
that keeps nothing (spec and status preserve unknown fields: the floor of any CRD). The
PyTorchJob as training-operator's CRD defines it is the reference (its validating webhook is not
called here: the test bed registers none).
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from auditlog import Window, server_seconds
from burst import QUEUE, job_name
from common import REPO, install_crds, kubectl, torchrunjob

Schema = dict[str, Any]
TORCHRUNJOB_CRD = REPO / "crd" / "torchrun.ai_torchrunjobs.yaml"


def _walk(schema: Schema, drop: frozenset[str]) -> Schema:
    """A copy of a JSON schema node without the keywords in `drop`, at every depth (property names
    are names, not keywords: a field called `default` stays)."""
    out = {k: v for k, v in schema.items() if k not in drop}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: _walk(s, drop) for name, s in out["properties"].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _walk(out[key], drop)
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [_walk(s, drop) for s in out[key]]
    return out


def _minimal(_: Schema) -> Schema:
    loose = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {"type": "object", "properties": {"spec": dict(loose), "status": dict(loose)}}


VARIANTS: dict[str, Callable[[Schema], Schema]] = {
    "no-cel": lambda s: _walk(s, frozenset({"x-kubernetes-validations"})),
    "no-defaults": lambda s: _walk(s, frozenset({"default"})),
    "no-cel-no-defaults": lambda s: _walk(s, frozenset({"x-kubernetes-validations", "default"})),
    "minimal-schema": _minimal,
}


def variant_crd(crd: dict[str, Any], name: str) -> dict[str, Any]:
    """The TorchrunJob CRD in group `<name>.bench.torchrun.ai`, its schema changed by VARIANTS[name]."""
    out = copy.deepcopy(crd)
    group = f"{name}.bench.torchrun.ai"
    out["metadata"] = {"name": f"{out['spec']['names']['plural']}.{group}"}
    out["spec"]["group"] = group
    for version in out["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        version["schema"]["openAPIV3Schema"] = VARIANTS[name](schema)
    return out


def install_variants(kubeconfig: Path) -> dict[str, str]:
    """Install every variant of the TorchrunJob CRD; each variant's apiVersion for its objects."""
    crd = yaml.safe_load(TORCHRUNJOB_CRD.read_text())
    versions: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in VARIANTS:
            out = variant_crd(crd, name)
            (Path(tmp) / f"{name}.yaml").write_text(yaml.safe_dump(out))
            served = next(v["name"] for v in out["spec"]["versions"] if v.get("storage"))
            versions[name] = f"{out['spec']['group']}/{served}"
        install_crds(kubeconfig, Path(tmp))
    return versions


def timed_create(kubeconfig: Path, ns: str, objects: list[dict[str, Any]]) -> dict[str, float]:
    """`kubectl create -f` of `objects` into a new namespace `ns`: client seconds, and the server's
    median and total seconds over the creates of those objects."""
    kubectl(kubeconfig, "create", "namespace", ns)
    window = Window(kubeconfig.parent, ns)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump_all(objects, f)
        f.flush()
        start = time.perf_counter()
        kubectl(kubeconfig, "create", "-n", ns, "-f", f.name, "-o", "name")
        wall = time.perf_counter() - start
    kinds = {o["kind"].lower() + "s" for o in objects}
    creates = [
        server_seconds(e)
        for e in window.writes()
        if e["verb"] == "create" and (e.get("objectRef") or {}).get("resource") in kinds
    ]
    if len(creates) != len(objects):
        raise RuntimeError(f"{ns}: {len(creates)} creates in the audit log for {len(objects)} objects")
    return {"wall": wall, "server_p50": statistics.median(creates), "server_sum": sum(creates)}


def measure(
    kubeconfig: Path, n: int, subjects: dict[str, Callable[[str], dict[str, Any]]], rounds: int = 2
) -> dict[str, list[dict[str, float]]]:
    """`timed_create` of N objects of every subject (name → manifest of job `name`), `rounds` times,
    the subjects interleaved so that drift in the machine's load spreads over all of them."""
    out: dict[str, list[dict[str, float]]] = {s: [] for s in subjects}
    for r in range(rounds):
        for i, (subject, make) in enumerate(subjects.items()):
            ns = f"adm-{i}-{r}"
            out[subject].append(timed_create(kubeconfig, ns, [make(job_name(i)) for i in range(n)]))
    return out


def torchrunjob_subjects(versions: dict[str, str]) -> dict[str, Callable[[str], dict[str, Any]]]:
    """The TorchrunJob as shipped and in each installed variant."""
    subjects: dict[str, Callable[[str], dict[str, Any]]] = {
        "TorchrunJob": lambda name: torchrunjob(name, QUEUE)
    }
    for variant, api_version in versions.items():
        subjects[f"TorchrunJob {variant}"] = lambda name, v=api_version: torchrunjob(
            name, QUEUE, api_version=v
        )
    return subjects
