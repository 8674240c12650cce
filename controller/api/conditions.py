"""Status conditions (metav1.Condition) and the pure helpers that keep them.

Conditions follow the Kubernetes API conventions: keyed by `type` (PascalCase, observed state),
`status` True/False/Unknown, a CamelCase one-word `reason`, a human `message`, the
`observedGeneration` they were computed from, and a `lastTransitionTime` that moves only when
`status` changes. `set_condition` returns a new tuple and never mutates its input; when nothing
changes it returns the very same tuple, so `new is old` tells a reconciler it has nothing to write.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from controller.api.codec import from_json
from controller.api.fielderrors import InvalidObjectError
from controller.api.fields import api

CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
MAX_CONDITIONS = 16


class ConditionStatus(str, enum.Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class Condition:
    """One aspect of the object's observed state (metav1.Condition)."""

    type: str = field(
        metadata=api(
            "Type of condition in PascalCase.", schema={"maxLength": 316, "pattern": CONDITION_TYPE_PATTERN}
        )
    )
    status: ConditionStatus = field(metadata=api("True, False or Unknown."))
    reason: str = field(
        metadata=api(
            "Why the condition is in this status, one CamelCase word.",
            schema={"minLength": 1, "maxLength": 1024, "pattern": REASON_PATTERN},
        )
    )
    last_transition_time: datetime.datetime = field(metadata=api("When the status last changed."))
    message: str = field(default="", metadata=api("Human-readable details.", schema={"maxLength": 32768}))
    observed_generation: int = field(
        default=0,
        metadata=api(
            "The metadata.generation the condition was computed from.",
            schema={"minimum": 0, "format": "int64"},
        ),
    )


CONDITION_LIST_SCHEMA = {
    "maxItems": MAX_CONDITIONS,
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


def find_condition(conditions: Sequence[Condition], type: str) -> Condition | None:
    """The condition of this type, or None."""
    return next((c for c in conditions if c.type == type), None)


def is_true(conditions: Sequence[Condition], type: str) -> bool:
    found = find_condition(conditions, type)
    return found is not None and found.status is ConditionStatus.TRUE


def set_condition(
    conditions: Sequence[Condition],
    type: str,
    status: ConditionStatus | bool,
    reason: str,
    message: str,
    observed_generation: int,
    now: datetime.datetime,
) -> tuple[Condition, ...]:
    """Conditions with `type` set as given; `lastTransitionTime` moves only when `status` does.

    The input is not modified. When nothing changes the result equals the input (and is the
    input itself when that was a tuple), so a caller can skip the status write; a new type is
    appended, keeping the others' order.
    """
    if isinstance(status, bool):
        status = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    current = tuple(conditions)
    old = find_condition(current, type)
    if old is None:
        new = Condition(type, status, reason, now, message, observed_generation)
        return (*current, new)
    moved = old.status is not status
    updated = replace(
        old,
        status=status,
        reason=reason,
        message=message,
        observed_generation=observed_generation,
        last_transition_time=now if moved else old.last_transition_time,
    )
    if updated == old:
        return current
    return tuple(updated if c.type == type else c for c in current)


def remove_condition(conditions: Sequence[Condition], type: str) -> tuple[Condition, ...]:
    """Conditions without `type` (the same tuple when there was none)."""
    current = tuple(conditions)
    if find_condition(current, type) is None:
        return current
    return tuple(c for c in current if c.type != type)


@dataclass(frozen=True)
class _StoredConditions:
    conditions: tuple[Condition, ...] = field(
        default=(), metadata=api("Conditions as stored.", schema=CONDITION_LIST_SCHEMA)
    )


def stored_conditions(obj: Mapping[str, Any]) -> tuple[Condition, ...]:
    """The conditions in an object's stored status, parsed on their own — for an object whose spec
    does not parse, so its conditions still keep their `lastTransitionTime`; () when they do not
    parse either."""
    raw = (obj.get("status") or {}).get("conditions") or []
    try:
        return from_json(_StoredConditions, {"conditions": raw}).conditions
    except InvalidObjectError:
        return ()
