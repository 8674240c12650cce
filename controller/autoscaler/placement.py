"""Dry-run placement: can a pod go on a node, and which node would take it.

It checks what kube-scheduler's filters check for our pods: every requested amount fits in the
node's free amount, the nodeSelector matches the node's labels, and every NoSchedule/NoExecute
taint is tolerated. Affinity, topology spread and ports are not modelled: the pass after a
mistaken guess sees the pod waiting and gives the room back. Among the nodes that fit it picks the
one left with the least of the pod's GPUs (best fit), so whole nodes stay whole for the jobs that
need them. `FreeCapacity` keeps the nodes sorted by their free amount of each GPU resource (and
cpu), so a lookup starts at the first node with enough and a full cluster answers at once.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence

from controller.autoscaler.model import Node, PodShape, Resources

_HARD_EFFECTS = ("NoSchedule", "NoExecute")
CPU = "cpu"


def matches(node: Node, pod: PodShape) -> bool:
    """The node's labels and taints admit the pod (resources aside)."""
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return all(
        any(t.tolerates(taint) for t in pod.tolerations)
        for taint in node.taints
        if taint.effect in _HARD_EFFECTS
    )


def fits(free: Resources, requests: Resources) -> bool:
    return all(free.get(name, 0) >= amount for name, amount in requests.items() if amount > 0)


class FreeCapacity:
    """The free amounts of every node while a plan is being made (the snapshot stays untouched)."""

    def __init__(self, nodes: Sequence[Node], keys: Iterable[str]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.free: dict[str, dict[str, int]] = {n.name: dict(n.free) for n in nodes}
        self._sorted = {key: sorted((n.free.get(key, 0), n.name) for n in nodes) for key in {*keys, CPU}}

    def _key(self, requests: Resources) -> str:
        for key in self._sorted:
            if key != CPU and requests.get(key, 0) > 0:
                return key
        return CPU

    def best_fit(self, pod: PodShape) -> str | None:
        """The node that would take `pod` now, or None."""
        key = self._key(pod.requests)
        order = self._sorted[key]
        start = bisect.bisect_left(order, (pod.requests.get(key, 0), ""))
        for _, name in order[start:]:
            if fits(self.free[name], pod.requests) and matches(self.nodes[name], pod):
                return name
        return None

    def admits(self, name: str, pod: PodShape) -> bool:
        """The node could take the pod if enough were freed on it (labels, taints, size)."""
        node = self.nodes.get(name)
        return node is not None and matches(node, pod) and fits(node.allocatable, pod.requests)

    def take(self, name: str, requests: Resources) -> None:
        self._change(name, requests, -1)

    def give(self, name: str, requests: Resources) -> None:
        self._change(name, requests, +1)

    def _change(self, name: str, requests: Mapping[str, int], sign: int) -> None:
        free = self.free[name]
        for res, amount in requests.items():
            old = free.get(res, 0)
            free[res] = old + sign * amount
            order = self._sorted.get(res)
            if order is not None and amount:
                del order[bisect.bisect_left(order, (old, name))]
                bisect.insort(order, (free[res], name))
