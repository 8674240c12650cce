"""A progress record: one JSON line of the training program, parsed with hard bounds.

A line is at most `MAX_LINE_BYTES` of UTF-8 holding one JSON object. Known keys: `step`,
`total_steps` (integers, 0..2**53), `epoch`, `samples_per_second` (finite numbers ≥ 0) and `rank`
(an integer 0..65535). Every other key whose value is a finite number (not a boolean) is a user
metric, kept when its name matches `METRIC_NAME` — at most `MAX_METRICS` of them, the first ones
of the line. Anything else is dropped: a line that is not such an object gives no record at all
(`parse_line` returns None), a bad value loses only its key. Nothing here raises on any input:
a hostile or broken training program cannot crash the reporter or the controller, and the
controller parses what a pod sends it with the same code (`parse_object`), since a pod is not
trusted either.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_LINE_BYTES = 16 * 1024
MAX_METRICS = 32
MAX_STEP = 2**53  # beyond this a float loses steps: a rate and an ETA would be nonsense
MAX_RANK = 65535
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]{0,62}")
_KNOWN = frozenset({"step", "total_steps", "epoch", "samples_per_second", "rank"})


@dataclass(frozen=True)
class Record:
    """The values of one valid line; None where the line did not say (or said nonsense)."""

    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    samples_per_second: float | None = None
    rank: int | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The record as the line format spells it (None fields left out); `parse_object` of it
        gives it back."""
        out: dict[str, Any] = {}
        for key in ("step", "total_steps", "epoch", "samples_per_second", "rank"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        out.update(self.metrics)
        return out


def parse_line(line: bytes) -> Record | None:
    """The record of one line (without its newline), or None when it is not a valid one: longer
    than `MAX_LINE_BYTES`, not UTF-8, not JSON, too deeply nested, or not a JSON object."""
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        text = line.decode("utf-8")
        value = json.loads(text, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return parse_object(value)


def parse_object(value: Any) -> Record | None:
    """The record of an already decoded JSON value (a line, or a report's `record`): None unless
    it is an object; each key validated and bounded as the module docstring says."""
    if not isinstance(value, Mapping):
        return None
    metrics: dict[str, float] = {}
    for key, raw in value.items():
        if key in _KNOWN or len(metrics) >= MAX_METRICS:
            continue
        number = _finite(raw)
        if number is not None and isinstance(key, str) and METRIC_NAME.fullmatch(key):
            metrics[key] = number
    return Record(
        step=_integer(value.get("step"), MAX_STEP),
        total_steps=_positive(_integer(value.get("total_steps"), MAX_STEP)),
        epoch=_non_negative(_finite(value.get("epoch"))),
        samples_per_second=_non_negative(_finite(value.get("samples_per_second"))),
        rank=_integer(value.get("rank"), MAX_RANK),
        metrics=metrics,
    )


def _no_constant(name: str) -> None:
    """`NaN`, `Infinity` and `-Infinity` are not JSON: they parse to None (then dropped)."""
    return None


def _finite(raw: Any) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    try:
        number = float(raw)
    except OverflowError:  # an integer beyond a double
        return None
    return number if math.isfinite(number) else None


def _integer(raw: Any, maximum: int) -> int | None:
    """A whole number in 0..maximum (an integral float such as `1200.0` counts)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw if 0 <= raw <= maximum else None
    number = _finite(raw)
    if number is None or number != int(number) or not 0 <= number <= maximum:
        return None
    return int(number)


def _positive(value: int | None) -> int | None:
    return value if value else None


def _non_negative(value: float | None) -> float | None:
    return value if value is not None and value >= 0 else None
