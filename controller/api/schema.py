"""API dataclasses → OpenAPI v3 schema, structural as apiextensions.k8s.io/v1 requires.

`object_schema(cls)` walks the same field declarations `codec` parses with (see `fields`), so the
schema in `crd/` is a pure function of the Python types. What it guarantees:
  * every property has a description and a type; required fields are listed;
  * Python defaults become server defaults; a defaulted nested object defaults to its own
    defaults spelled out (see `defaulted_object`), so it may not have required fields;
  * quantities are int-or-string with `quantity.PATTERN`; enums list their values and aliases;
  * CEL rules declared on a class or a field land in `x-kubernetes-validations` of that node.
Status types are rendered with `defaults=False`: the controller owns status and writes it whole.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Mapping
from typing import Any

from controller.api.codec import to_json
from controller.api.fields import FieldType, Kind, ResolvedField, class_rules, resolved_fields
from controller.api.quantity import PATTERN as QUANTITY_PATTERN
from controller.api.quantity import Quantity

_JSON_TYPES = {bool: "boolean", int: "integer", str: "string"}


def object_schema(cls: type, *, defaults: bool = True, description: str | None = None) -> dict[str, Any]:
    """The schema of dataclass `cls`; `description` defaults to its docstring's first paragraph."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f in resolved_fields(cls):
        properties[f.json_name] = field_schema(f, defaults=defaults)
        if f.required:
            required.append(f.json_name)
    out: dict[str, Any] = {"description": description or describe(cls), "type": "object"}
    if required:
        out["required"] = required
    out["properties"] = properties
    rules = class_rules(cls)
    if rules:
        out["x-kubernetes-validations"] = [r.to_json() for r in rules]
    return out


def describe(cls: type) -> str:
    """The first paragraph of a class docstring, on one line."""
    doc = inspect.getdoc(cls) or cls.__name__
    return " ".join(doc.split("\n\n", 1)[0].split())


def field_schema(f: ResolvedField, *, defaults: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"description": f.info.description}
    out.update(type_schema(f.type, f.info.items, defaults=defaults))
    if f.type.kind is Kind.OBJECT:
        out["description"] = f.info.description  # the field's words beat the class docstring
    if f.info.aliases:
        out["enum"] = [*out["enum"], *f.info.aliases]
    if f.info.object_defaults and defaults:
        out["properties"] = {
            key: {
                "description": f"Defaults to {json.dumps(value)}.",
                "type": _JSON_TYPES[type(value)],
                "default": value,
            }
            for key, value in f.info.object_defaults.items()
        }
    out.update(f.info.schema)
    rules = [*out.get("x-kubernetes-validations", []), *(r.to_json() for r in f.info.rules)]
    if rules:
        out["x-kubernetes-validations"] = rules
    if defaults and not f.required:
        default = schema_default(f)
        if default is not None:
            out["default"] = default
    return out


def type_schema(ftype: FieldType, items: Mapping[str, Any], *, defaults: bool) -> dict[str, Any]:
    kind = ftype.kind
    if kind is Kind.OBJECT:
        return object_schema(ftype.python, defaults=defaults)
    if kind is Kind.LIST:
        assert ftype.item is not None
        return {"type": "array", "items": {**type_schema(ftype.item, {}, defaults=defaults), **items}}
    if kind is Kind.STR_MAP:
        return {"type": "object", "additionalProperties": {"type": "string", **items}}
    if kind is Kind.NUMBER_MAP:
        return {"type": "object", "additionalProperties": {"type": "number", **items}}
    if kind is Kind.INT_MAP:
        return {"type": "object", "additionalProperties": {"type": "integer", "format": "int32", **items}}
    if kind is Kind.JSON_OBJECT:
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if kind is Kind.QUANTITY:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    if kind is Kind.ENUM:
        return {"type": "string", "enum": [m.value for m in ftype.python]}
    if kind is Kind.DATETIME:
        return {"type": "string", "format": "date-time"}
    names = {Kind.BOOL: "boolean", Kind.INT: "integer", Kind.FLOAT: "number", Kind.STR: "string"}
    return {"type": names[kind]}


def schema_default(f: ResolvedField) -> Any:
    """The server-side default of an optional field, or None when the server should not write one."""
    value = f.default()
    if value is None:
        return None
    if f.info.object_defaults:
        return dict(f.info.object_defaults)
    if dataclasses.is_dataclass(value) and not isinstance(value, (type, Quantity)):
        cls: type = type(value)
        assert value == cls(), f"{f.name}: a defaulted object must default to {cls.__name__}()"
        return defaulted_object(cls)
    if isinstance(value, (tuple, Mapping)) and not value:
        return None
    return to_json(value)


def defaulted_object(cls: type) -> dict[str, Any]:
    """What the server's defaulting makes of `{}` for `cls`, spelled out.

    A defaulted object carries its nested defaults explicitly rather than `{}`: the API server
    checks each default against the CEL rules of its node *without* applying nested defaults
    first, so a rule such as `self.rdzvBackend != 'etcd-v2' || ...` would fail on a bare `{}`.
    """
    out: dict[str, Any] = {}
    for f in resolved_fields(cls):
        assert not f.required, f"{cls.__name__}.{f.name} is required, so {cls.__name__} cannot be defaulted"
        default = schema_default(f)
        if default is not None:
            out[f.json_name] = default
    return out
