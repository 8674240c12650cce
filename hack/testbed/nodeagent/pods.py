"""What the pod handlers share: where a pod's files live, and which pods are ours to serve."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller.cache import Lister
from nodeagent.api import is_kwok_node

Obj = Mapping[str, Any]


def pod_dir(root: Path, pod: Obj) -> Path:
    """`<root>/<namespace>_<name>_<uid>`, the kubelet's /var/log/pods naming."""
    meta = pod["metadata"]
    return root / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"


def on_kwok_node(pod: Obj, nodes: Lister) -> bool:
    node = pod["spec"].get("nodeName")
    return bool(node) and is_kwok_node(nodes.get(node))


def remove_dirs_of(root: Path, namespace: str, name: str, keep_uid: str | None = None) -> None:
    """Remove the directories of every pod `namespace/name` but the one with `keep_uid`."""
    for path in root.glob(f"{namespace}_{name}_*"):
        if path.name.rsplit("_", 1)[1] != keep_uid:
            shutil.rmtree(path, ignore_errors=True)
