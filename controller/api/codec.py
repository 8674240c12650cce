"""Raw JSON (as the API server and the informers hold it) ↔ the frozen API dataclasses.

`from_json` reads camelCase dicts: missing or null fields take their declared default, aliases are
normalised (`zip` → `upload`), quantities and timestamps become `Quantity` and aware `datetime`,
lists become tuples. It never mutates its input: opaque sub-objects are deep-copied. Unknown keys
are ignored (the server prunes them anyway; ignoring them keeps an older controller working
against a newer CRD). Type errors, unsupported enum values and out-of-range integers are
collected for every field and raised together as one `InvalidObjectError`, each naming its path;
everything else the schema constrains is left to the API server, which has already enforced it
on every object an informer hands us.

`to_json` is the inverse for writing (status patches, manifests): `None` fields are omitted.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
from collections.abc import Mapping
from typing import Any, Final, TypeVar

from controller.api.fielderrors import FieldError, InvalidObjectError, join_path
from controller.api.fields import FieldType, Kind, ResolvedField, resolved_fields
from controller.api.quantity import Quantity

T = TypeVar("T")


class _Bad:
    """Marks a value that could not be parsed; its error is already recorded."""


_BAD: Final = _Bad()


def from_json(cls: type[T], raw: Mapping[str, Any] | None, path: str = "") -> T:
    """Parse `raw` into `cls`, applying defaults; raise `InvalidObjectError` naming every bad field."""
    errors: list[FieldError] = []
    value = _parse_object(cls, raw if raw is not None else {}, path, errors)
    if errors or isinstance(value, _Bad):
        raise InvalidObjectError(errors or [FieldError(path or "<root>", "could not be parsed")])
    result: T = value
    return result


def to_json(value: Any) -> Any:
    """Serialise an API value (dataclass, enum, Quantity, datetime, tuple, mapping) to JSON."""
    if isinstance(value, Quantity):  # a dataclass itself, but a scalar in JSON
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.json_name: to_json(getattr(value, f.name))
            for f in resolved_fields(type(value))
            if getattr(value, f.name) is not None
        }
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.datetime):
        return format_time(value)
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_json(v) for k, v in value.items()}
    return value


def format_time(value: datetime.datetime) -> str:
    """RFC 3339 in UTC with second precision, as metav1.Time writes it."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> datetime.datetime:
    """Parse an RFC 3339 timestamp into an aware datetime (Python 3.10 rejects a bare `Z`)."""
    parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def _parse_object(cls: type, raw: Any, path: str, errors: list[FieldError]) -> Any:
    if not isinstance(raw, Mapping):
        errors.append(FieldError(path or "<root>", f"must be an object, not {_json_type(raw)}"))
        return _BAD
    kwargs: dict[str, Any] = {}
    errors_before = len(errors)
    for f in resolved_fields(cls):
        value = raw.get(f.json_name)
        if value is None and not f.required and not f.info.object_defaults:
            kwargs[f.name] = f.default()  # the common case, kept cheap: most fields are absent
        else:
            kwargs[f.name] = _parse_field(f, value, join_path(path, f.json_name), errors)
    if len(errors) > errors_before:
        return _BAD
    return cls(**kwargs)


def _parse_field(f: ResolvedField, raw: Any, path: str, errors: list[FieldError]) -> Any:
    if raw is None and f.info.object_defaults:
        raw = {}
    if raw is None:
        errors.append(FieldError(path, "Required value"))
        return _BAD
    if f.type.kind is Kind.ENUM and isinstance(raw, str):
        raw = f.info.aliases.get(raw, raw)
    if f.type.kind is Kind.JSON_OBJECT and isinstance(raw, Mapping):
        raw = {**f.info.object_defaults, **raw}
    value = _parse_value(f.type, raw, path, errors)
    if f.type.kind is Kind.INT and isinstance(value, int):
        _check_range(value, f.info.schema, path, errors)
    if f.type.kind is Kind.LIST and isinstance(value, tuple) and f.type.item and f.type.item.kind is Kind.INT:
        for i, item in enumerate(value):
            _check_range(item, f.info.items, f"{path}[{i}]", errors)
    return value


def _parse_value(ftype: FieldType, raw: Any, path: str, errors: list[FieldError]) -> Any:
    kind = ftype.kind
    if kind is Kind.OBJECT:
        return _parse_object(ftype.python, raw, path, errors)
    if kind is Kind.LIST:
        if not isinstance(raw, list | tuple):  # tuples: frozen informer-cache objects
            return _bad(errors, path, f"must be a list, not {_json_type(raw)}")
        assert ftype.item is not None
        items = [_parse_value(ftype.item, v, f"{path}[{i}]", errors) for i, v in enumerate(raw)]
        return _BAD if any(isinstance(v, _Bad) for v in items) else tuple(items)
    if kind in (Kind.STR_MAP, Kind.NUMBER_MAP, Kind.INT_MAP, Kind.JSON_OBJECT):
        if not isinstance(raw, Mapping):
            return _bad(errors, path, f"must be an object, not {_json_type(raw)}")
        if kind is Kind.STR_MAP and not all(isinstance(v, str) for v in raw.values()):
            return _bad(errors, path, "values must be strings")
        if kind is Kind.NUMBER_MAP:
            if not all(_is_number(v) for v in raw.values()):
                return _bad(errors, path, "values must be numbers")
            return {k: float(v) for k, v in raw.items()}
        if kind is Kind.INT_MAP:
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in raw.values()):
                return _bad(errors, path, "values must be integers")
            return dict(raw)
        return copy.deepcopy(dict(raw))
    return _parse_scalar(ftype, raw, path, errors)


def _parse_scalar(ftype: FieldType, raw: Any, path: str, errors: list[FieldError]) -> Any:
    kind = ftype.kind
    if kind is Kind.BOOL:
        return (
            raw if isinstance(raw, bool) else _bad(errors, path, f"must be a boolean, not {_json_type(raw)}")
        )
    if kind is Kind.INT:
        ok = isinstance(raw, int) and not isinstance(raw, bool)
        return raw if ok else _bad(errors, path, f"must be an integer, not {_json_type(raw)}")
    if kind is Kind.FLOAT:
        ok = _is_number(raw)
        return float(raw) if ok else _bad(errors, path, f"must be a number, not {_json_type(raw)}")
    if kind is Kind.STR:
        return raw if isinstance(raw, str) else _bad(errors, path, f"must be a string, not {_json_type(raw)}")
    if kind is Kind.ENUM:
        try:
            return ftype.python(raw)
        except (TypeError, ValueError):
            supported = ", ".join(f'"{m.value}"' for m in ftype.python)
            return _bad(errors, path, f'Unsupported value: "{raw}": supported values: {supported}')
    if kind is Kind.QUANTITY:
        try:
            return Quantity.parse(raw)
        except ValueError as exc:
            return _bad(errors, path, str(exc))
    if kind is Kind.DATETIME:
        try:
            return parse_time(raw)
        except (TypeError, ValueError, AttributeError):
            return _bad(errors, path, f"must be an RFC 3339 timestamp, not {raw!r}")
    raise AssertionError(f"unhandled kind {kind}")


def _check_range(value: int, schema: Mapping[str, Any], path: str, errors: list[FieldError]) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(FieldError(path, f"must be greater than or equal to {schema['minimum']}"))
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(FieldError(path, f"must be less than or equal to {schema['maximum']}"))


def _is_number(raw: Any) -> bool:
    return isinstance(raw, (int, float)) and not isinstance(raw, bool)


def _bad(errors: list[FieldError], path: str, message: str) -> _Bad:
    errors.append(FieldError(path, message))
    return _BAD


def _json_type(raw: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "object"}
    return names.get(type(raw), type(raw).__name__)
