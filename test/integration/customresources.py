"""CustomResourceDefinitions read from a directory, and removed from the API server for good."""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from pathlib import Path

import yaml
from jobs import condition
from testbed import Cluster


def crd_names(directory: Path) -> list[str]:
    names = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                names.append(doc["metadata"]["name"])
    return names


def served(cluster: Cluster, crd: str) -> bool:
    return cluster.found("crd", crd)


def api_served(cluster: Cluster, group_version: str) -> bool:
    """Discovery serves `group_version`, asked as the controller asks (`GET /apis/<gv>`)."""
    return cluster.kubectl("get", "--raw", f"/apis/{group_version}", check=False).returncode == 0


def crds_of_groups(cluster: Cluster, groups: Collection[str]) -> list[str]:
    """The installed CRDs of these API groups."""
    return [c["metadata"]["name"] for c in cluster.get("crd")["items"] if c["spec"]["group"] in groups]


def release_instances(cluster: Cluster, crds: list[str]) -> None:
    """Take the finalizers off every object of these CRDs: with the controller that set them gone
    (a scheduler that no longer runs), they would hold the objects, and so the CRDs, forever."""
    unset = json.dumps({"metadata": {"finalizers": None}})
    for crd in crds:
        for item in cluster.get(crd, "-A")["items"]:
            meta = item["metadata"]
            if meta.get("finalizers"):
                ns = ["-n", meta["namespace"]] if meta.get("namespace") else []
                cluster.kubectl("patch", crd, meta["name"], *ns, "--type=merge", "-p", unset, check=False)


def remove_crds(cluster: Cluster, names: list[str], timeout: float = 420) -> None:
    """Delete CRDs and wait until they are gone.

    kube-apiserver may take minutes: its CRD finalizer fails to list the instances while the
    resource's watch cache re-initialises ("storage is (re)initializing") and retries with an
    exponential backoff. An edit of the CRD requeues it at once, so the wait nudges it now and then.
    """
    cluster.kubectl("delete", "crd", *names, "--wait=false", check=False)
    deadline = time.monotonic() + timeout
    while left := [n for n in names if served(cluster, n)]:
        if time.monotonic() > deadline:
            stuck = [
                (n, (condition(cluster.get("crd", n), "Terminating") or {}).get("message")) for n in left
            ]
            raise AssertionError(f"CRDs not removed after {timeout}s: {stuck}")
        time.sleep(5)
        for n in left:
            nudge = {"metadata": {"annotations": {"torchrun.ai/nudge": str(time.monotonic_ns())}}}
            cluster.kubectl("patch", "crd", n, "--type=merge", "-p", json.dumps(nudge), check=False)
