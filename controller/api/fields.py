"""Field metadata: how a field of an API dataclass is named in JSON, documented and validated.

The API types are frozen dataclasses whose fields carry `metadata=api(...)`. That metadata
(description, extra OpenAPI keywords, CEL rules, accepted aliases) is read by two generic
walkers: `schema` (dataclass → OpenAPI v3 schema for the CRD) and `codec` (raw JSON dict ↔
dataclass). Because both read the same declarations, the CRD and the Python types cannot drift:
a field's JSON name, type, default and enum exist exactly once.

Conventions:
  * JSON names are the camelCase of the Python name (`size_per_gpu` → `sizePerGPU` needs an
    explicit `json_name`; `claim_name` → `claimName` does not).
  * A field without a default is required; a field defaulting to `None` is optional; any other
    default is also the server-side default (written by the API server on create), except empty
    collections, because absent and empty mean the same thing to us.
  * `JSONObject` marks an opaque Kubernetes object passed through untouched (affinity,
    `valueFrom`): the schema preserves its unknown fields and the codec deep-copies it.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING
from typing import Any, Final, TypeVar

from controller.api.quantity import Quantity

JSONObject = Mapping[str, Any]
"""An opaque JSON object (a Kubernetes sub-object we pass through); treat it as read-only."""

_KEY: Final = "torchrun.ai/field"
_RULES_ATTR: Final = "__cel_rules__"
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Rule:
    """A CEL rule (`x-kubernetes-validations` entry); `message` should name the field it is about."""

    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    description: str
    json_name: str | None = None
    schema: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    items: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    object_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def api(
    description: str,
    *,
    json_name: str | None = None,
    schema: Mapping[str, Any] | None = None,
    items: Mapping[str, Any] | None = None,
    aliases: Mapping[str, str] | None = None,
    rules: tuple[Rule, ...] = (),
    object_defaults: Mapping[str, Any] | None = None,
) -> dict[str, FieldInfo]:
    """The `metadata=` of an API field: `x: int = field(default=0, metadata=api("What x is."))`.

    `schema` holds extra OpenAPI keywords for the field itself (`minimum`, `maxLength`, ...),
    `items` those for each list item or map value. `aliases` are accepted spellings of enum
    values that parsing normalises (the schema's enum lists them too). `object_defaults` are keys
    defaulted inside an opaque `JSONObject` (by the server and by parsing alike).
    """
    info = FieldInfo(
        description=description,
        json_name=json_name,
        schema=dict(schema or {}),
        items=dict(items or {}),
        aliases=dict(aliases or {}),
        rules=rules,
        object_defaults=dict(object_defaults or {}),
    )
    return {_KEY: info}


def cel(*rules: Rule) -> Callable[[type[T]], type[T]]:
    """Class decorator: CEL rules evaluated with `self` bound to an object of this type."""

    def attach(cls: type[T]) -> type[T]:
        setattr(cls, _RULES_ATTR, tuple(rules))
        return cls

    return attach


def class_rules(cls: type) -> tuple[Rule, ...]:
    rules: tuple[Rule, ...] = cls.__dict__.get(_RULES_ATTR, ())
    return rules


class Kind(enum.Enum):
    """The JSON shapes an annotation can have."""

    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STR = "str"
    ENUM = "enum"
    QUANTITY = "quantity"
    DATETIME = "datetime"
    LIST = "list"
    STR_MAP = "str-map"
    NUMBER_MAP = "number-map"
    INT_MAP = "int-map"
    JSON_OBJECT = "json-object"
    OBJECT = "object"


@dataclasses.dataclass(frozen=True)
class FieldType:
    """An annotation reduced to its JSON shape; `item` is the element type of lists."""

    kind: Kind
    python: Any
    item: FieldType | None = None


def field_type(annotation: Any) -> FieldType:
    """Classify a (non-optional) annotation; unsupported annotations are programming errors."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        element, ellipsis = typing.get_args(annotation)
        assert ellipsis is Ellipsis, f"use tuple[X, ...] for lists, not {annotation}"
        return FieldType(Kind.LIST, annotation, field_type(element))
    if origin is Mapping:
        key, value = typing.get_args(annotation)
        assert key is str, f"map keys must be str in {annotation}"
        if value is float:
            return FieldType(Kind.NUMBER_MAP, annotation)
        if value is int:
            return FieldType(Kind.INT_MAP, annotation)
        return FieldType(Kind.JSON_OBJECT if value is Any else Kind.STR_MAP, annotation)
    simple = {
        bool: Kind.BOOL,
        int: Kind.INT,
        float: Kind.FLOAT,
        str: Kind.STR,
        Quantity: Kind.QUANTITY,
        datetime.datetime: Kind.DATETIME,
    }
    if annotation in simple:
        return FieldType(simple[annotation], annotation)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return FieldType(Kind.ENUM, annotation)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return FieldType(Kind.OBJECT, annotation)
    raise TypeError(f"unsupported API field type {annotation!r}")


@dataclasses.dataclass(frozen=True)
class ResolvedField:
    """A dataclass field with its annotation resolved and its metadata read."""

    name: str
    json_name: str
    type: FieldType
    optional: bool
    info: FieldInfo
    field: dataclasses.Field[Any]

    @property
    def required(self) -> bool:
        return self.field.default is MISSING and self.field.default_factory is MISSING

    def default(self) -> Any:
        """The Python default (a fresh value for factories); only call when not required."""
        if self.field.default_factory is not MISSING:
            return self.field.default_factory()
        return self.field.default


@functools.cache
def resolved_fields(cls: type) -> tuple[ResolvedField, ...]:
    """The API fields of dataclass `cls`, in declaration order (cached: the types are static)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        info = f.metadata.get(_KEY)
        assert isinstance(info, FieldInfo), f"{cls.__name__}.{f.name} needs metadata=api(...)"
        annotation, optional = _strip_optional(hints[f.name])
        out.append(
            ResolvedField(
                name=f.name,
                json_name=info.json_name or camel_case(f.name),
                type=field_type(annotation),
                optional=optional,
                info=info,
                field=f,
            )
        )
    return tuple(out)


def camel_case(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        assert len(args) == 1, f"only `X | None` unions are supported, not {annotation}"
        return args[0], True
    return annotation, False
