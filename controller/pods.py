"""What a pod's manifest says about it (client-go's `podutil`): one home for each pod fact the
controllers, the autoscaler, the progress endpoint and the plugin read.

- `is_live`: the pod runs or waits to — not ended (`Succeeded`/`Failed`) and not terminating;
- `is_ready`: its `Ready` condition is True;
- `node_rank`: the completion index the Job controller wrote in its `COMPLETION_INDEX_ANNOTATION`
  (None without a readable one);
- `unschedulable`: the scheduler's words for the pods it cannot place;
- `disruption`: its `DisruptionTarget=True` condition — evicted, preempted, or lost with its node
  (taint eviction, pod GC) — whatever its containers exited with, not the training's fault.
Pure functions of the pod's JSON, on the standard library alone: the lowest layer, so any part of
the controller and the plugin may import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
ENDED_PHASES: Final = ("Succeeded", "Failed")


def is_live(pod: Mapping[str, Any]) -> bool:
    """The pod runs or waits to: not ended, not terminating."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ENDED_PHASES and not pod["metadata"].get("deletionTimestamp")


def is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_rank(pod: Mapping[str, Any]) -> int | None:
    """The pod's completion index (an Indexed Job's pod): its node rank."""
    try:
        return int((pod["metadata"].get("annotations") or {})[COMPLETION_INDEX_ANNOTATION])
    except (KeyError, ValueError):
        return None


def unschedulable(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """The scheduler's words for the pods it cannot place, if any: each distinct message
    once, after the first pod (by name) it was written on, `; `-separated. A gang scheduler turns
    a gang's pods away with different words — the pod that did not fit says why, its siblings
    only that they went with it (Coscheduling: "optimistic rejection in PostFilter") — so quoting
    one pod could quote the echo and never the reason."""
    said: dict[str, str] = {}
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        for cond in (pod.get("status") or {}).get("conditions") or ():
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"  # kube-scheduler's reason
            ):
                said.setdefault(cond.get("message") or "unschedulable", pod["metadata"]["name"])
    return "; ".join(f"pod {name}: {message}" for message, name in said.items()) or None


def disruption(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's `DisruptionTarget=True` condition (module doc), or None."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return cond  # type: ignore[no-any-return]
    return None
