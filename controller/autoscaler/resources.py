"""Resource amounts of nodes and pods as the scheduler counts them, in integer units.

A pod's request is kube-scheduler's: the larger of the sum of its containers and its largest
init container, per resource, plus the pod overhead. `cpu` is counted in millicores, everything
else (GPUs, memory in bytes) in whole units rounded up. A quantity that does not parse counts as
zero: planning around one odd object beats stopping the autoscaler.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from controller.api.quantity import Quantity
from controller.meta import Obj


@lru_cache(maxsize=4096)  # a cluster writes the same few amounts over and over
def _amount(resource: str, value: str) -> int:
    try:
        q = Quantity.parse(value)
    except ValueError:
        return 0
    return q.milli_value() if resource == "cpu" else q.value()


def amount(resource: str, value: Any) -> int:
    return _amount(resource, str(value))


def amounts(values: Mapping[str, Any] | None) -> dict[str, int]:
    return {name: amount(name, v) for name, v in (values or {}).items()}


def pod_requests(pod: Obj) -> dict[str, int]:
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        for name, n in amounts((c.get("resources") or {}).get("requests")).items():
            total[name] = total.get(name, 0) + n
    for c in spec.get("initContainers") or ():
        for name, n in amounts((c.get("resources") or {}).get("requests")).items():
            total[name] = max(total.get(name, 0), n)
    for name, n in amounts(spec.get("overhead")).items():
        total[name] = total.get(name, 0) + n
    return total


def node_allocatable(node: Obj) -> dict[str, int]:
    status = node.get("status") or {}
    return amounts(status.get("allocatable") or status.get("capacity"))
