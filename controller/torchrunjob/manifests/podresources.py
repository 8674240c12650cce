"""A worker pod's resources (pure): the queue's `nodeResources` is what the whole pod asks for.

The scheduler places a pod by its effective request, per resource (KEP-753, sidecars included):

    max(each init container's request + the sidecars started before it,
        the app containers' requests + every sidecar's)

where a sidecar is an init container with `restartPolicy: Always` (the controller sets no pod
overhead). Besides the training container the controller puts its own containers in every worker
pod — the `prepare` and workspace-copy init containers and the progress reporter, a sidecar — so a
training container that asked for the queue's whole node shape would make a pod that fits no node
sized exactly to it ("Insufficient cpu").

`share_node(pod, shape, container)` returns the pod spec with, for each resource of `shape`:
- the training container (`container`) requesting, and limited to, `shape` less what the other
  app containers and every sidecar request (its share; GPUs stay whole, since no other container
  asks for them);
- every other container's request and limit capped to what it can have beside the others: an init
  container `shape` less the sidecars started before it, a sidecar or another app container `shape`.
So the pod's effective request is `shape` exactly (`effective_requests`), and what a container is
limited to never exceeds what the pod asks for in all. Sidecars may still burst above their
request up to their own limit, as CPU and memory over a request always may. A shape that leaves
the training container nothing is a `ValueError` naming the queue's field; the queue never gets
that far (`controller.api.validation` refuses it against `RESERVED_PER_WORKER_POD`, the same
amounts the sidecar asks for).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from controller.api.quantity import Quantity

Amounts = dict[str, Quantity]
NONE = Quantity(Fraction(0))

# the queue field each resource of the node shape comes from, for messages
SHAPE_FIELDS = {"cpu": "spec.nodeResources.cpus", "memory": "spec.nodeResources.memory"}


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """An init container that runs beside the app containers (a native sidecar)."""
    return container.get("restartPolicy") == "Always"


def requests_of(container: Mapping[str, Any]) -> Amounts:
    resources = container.get("resources") or {}
    return {name: Quantity.parse(v) for name, v in (resources.get("requests") or {}).items()}


def _add(total: Amounts, more: Mapping[str, Quantity]) -> Amounts:
    out = dict(total)
    for name, q in more.items():
        out[name] = out[name] + q if name in out else q
    return out


def _sum(containers: Iterable[Mapping[str, Any]]) -> Amounts:
    total: Amounts = {}
    for c in containers:
        total = _add(total, requests_of(c))
    return total


def _less(a: Quantity, b: Quantity) -> Quantity:
    """`a - b`, never below zero."""
    return Quantity(max(a.amount - b.amount, Fraction(0)), a.format)


def effective_requests(pod: Mapping[str, Any]) -> Amounts:
    """What the scheduler counts for the pod spec `pod`, per resource (module doc)."""
    running: Amounts = {}  # the sidecars started so far
    peak: Amounts = {}
    for c in pod.get("initContainers") or ():
        if is_sidecar(c):
            running = _add(running, requests_of(c))
            during = running
        else:
            during = _add(running, requests_of(c))
        peak = {name: max(q, peak.get(name, q)) for name, q in {**peak, **during}.items()}
    steady = _add(_sum(pod.get("containers") or ()), running)
    return {name: max(q, peak.get(name, q)) for name, q in {**peak, **steady}.items()}


def reserved(pod: Mapping[str, Any], container: str) -> Amounts:
    """What runs beside the training container `container` requests: the other app containers
    and every sidecar."""
    others = [c for c in pod.get("containers") or () if c["name"] != container]
    return _sum([*others, *(c for c in pod.get("initContainers") or () if is_sidecar(c))])


def training_share(pod: Mapping[str, Any], shape: Mapping[str, Quantity], container: str) -> Amounts:
    """The training container's part of `shape` (module doc); `ValueError` when it is nothing."""
    taken = reserved(pod, container)
    share: Amounts = {}
    for name, whole in shape.items():
        left = _less(whole, taken.get(name, NONE))
        if left.is_zero():
            field = SHAPE_FIELDS.get(name, f"spec.nodeResources ({name})")
            raise ValueError(
                f"{field}: {whole} leaves nothing for the training container: the controller's "
                f"containers beside it in every worker pod request {taken[name]} of it"
            )
        share[name] = left
    return share


def _capped(container: Mapping[str, Any], budget: Mapping[str, Quantity]) -> dict[str, Any]:
    resources = container.get("resources") or {}
    out: dict[str, Any] = {}
    for kind in ("requests", "limits"):
        values = resources.get(kind)
        if values is None:
            continue
        out[kind] = {
            name: str(budget[name]) if name in budget and Quantity.parse(v) > budget[name] else v
            for name, v in values.items()
        }
    return {**container, "resources": out} if out else dict(container)


def share_node(pod: Mapping[str, Any], shape: Mapping[str, Quantity], container: str) -> dict[str, Any]:
    """`pod` (a pod spec) asking for `shape` in all (module doc); `pod` is not changed."""
    share = {name: str(q) for name, q in training_share(pod, shape, container).items()}
    containers = [
        {**c, "resources": {"requests": dict(share), "limits": dict(share)}}
        if c["name"] == container
        else _capped(c, shape)
        for c in pod.get("containers") or ()
    ]
    inits: list[dict[str, Any]] = []
    running: Amounts = {}
    for c in pod.get("initContainers") or ():
        if is_sidecar(c):
            inits.append(_capped(c, shape))
            running = _add(running, requests_of(c))
        else:
            budget = {name: _less(whole, running.get(name, NONE)) for name, whole in shape.items()}
            inits.append(_capped(c, budget))
    return {**pod, "containers": containers, "initContainers": inits}
