"""Immutable JSON objects for the informer cache.

`freeze` turns decoded JSON into `FrozenDict`s and tuples, interning keys and short string values
so the thousands of cached objects share one copy of every field name and of the values that
repeat from object to object (kinds, API versions, phases, condition types and statuses,
namespaces, node and job names, timestamps of the same second): a cached pod takes about a fifth
less RSS (hack/bench/bench_informer.py --baseline). Longer strings (UIDs, messages, commands)
rarely repeat and are kept as they are.
A `FrozenDict` is a real `dict` (fast reads, `json.dumps` works) whose mutators raise
`TypeError`, so a reconciler that edits a cached object fails loudly instead of corrupting the
cache. `thaw` makes a private, mutable deep copy; `same_json` compares a cached object with a
plain one without copying either.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn


class FrozenDict(dict[str, Any]):
    __slots__ = ()

    def _immutable(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("cached objects are read-only; thaw() a copy before changing it")

    __setitem__ = _immutable
    __delitem__ = _immutable
    __ior__ = _immutable
    clear = _immutable
    pop = _immutable
    popitem = _immutable
    setdefault = _immutable
    update = _immutable

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


_intern = sys.intern
# the longest string value interned: a UID (36) is unique to its object, a timestamp (20), a phase
# or a node name is shared by many; interned strings are freed with their last user
INTERN_MAX = 32


def freeze(value: Any) -> Any:
    """A read-only deep copy of decoded JSON (a FrozenDict already is one): dicts become
    FrozenDicts with interned keys, lists tuples, and strings of at most INTERN_MAX characters
    the interned copy equal to them."""
    if isinstance(value, FrozenDict):
        return value
    if isinstance(value, dict):
        return FrozenDict({_intern(k): freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if type(value) is str and len(value) <= INTERN_MAX:
        return _intern(value)
    return value


def thaw(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


def same_json(a: Any, b: Any) -> bool:
    """`thaw(a) == thaw(b)`, without copying: lists and tuples compare alike, the first difference
    ends the walk."""
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b):
            return False
        return all(k in b and same_json(v, b[k]) for k, v in a.items())
    if isinstance(a, list | tuple):
        if not isinstance(b, list | tuple) or len(a) != len(b):
            return False
        return all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(b, dict | list | tuple):
        return False
    return bool(a == b)
