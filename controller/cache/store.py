"""A thread-safe store with named indexes (client-go's ThreadSafeStore + Indexer).

Keys are `namespace/name` (just `name` for cluster-scoped objects). Index functions map an object
to index values; `by_index(name, value)` returns the objects with that value. Every operation
holds one lock for its whole duration, so readers never see half an update. Stored objects are
treated as immutable: callers store frozen objects and never change them afterwards.
"""

from __future__ import annotations

import builtins
import functools
import threading
from collections.abc import Callable, Iterable, Mapping

from controller.meta import Obj

IndexFunc = Callable[[Obj], list[str]]

NAMESPACE_INDEX = "namespace"
OWNER_INDEX = "owner"


def meta_namespace_key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def split_key(key: str) -> tuple[str | None, str]:
    ns, sep, name = key.partition("/")
    return (ns, name) if sep else (None, ns)


def namespace_index(obj: Obj) -> list[str]:
    ns = (obj.get("metadata") or {}).get("namespace")
    return [ns] if ns else []


def controller_owner_index(obj: Obj) -> list[str]:
    """`Kind/namespace/name` of the object's controller owner reference, if any."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return [f"{ref.get('kind')}/{meta.get('namespace') or ''}/{ref.get('name')}"]
    return []


LABEL_INDEX_PREFIX = "label:"


def label_index_name(label: str) -> str:
    """The name of the index on label `label` (what `Lister.list` looks for)."""
    return LABEL_INDEX_PREFIX + label


@functools.cache
def label_index(label: str) -> IndexFunc:
    """Index function: `namespace/value` of the object's label `label` (none without it). One
    function per label, so registering it twice on a shared informer is no conflict."""

    def index(obj: Obj) -> list[str]:
        meta = obj.get("metadata") or {}
        value = (meta.get("labels") or {}).get(label)
        return [] if value is None else [f"{meta.get('namespace') or ''}/{value}"]

    index.__name__ = f"label_index_{label}"
    return index


DEFAULT_INDEXERS: dict[str, IndexFunc] = {
    NAMESPACE_INDEX: namespace_index,
    OWNER_INDEX: controller_owner_index,
}


class Indexer:
    def __init__(
        self,
        indexers: Mapping[str, IndexFunc] | None = None,
        key_func: Callable[[Obj], str] = meta_namespace_key,
    ) -> None:
        self._lock = threading.RLock()
        self._items: dict[str, Obj] = {}
        self._key_func = key_func
        self._indexers: dict[str, IndexFunc] = dict(DEFAULT_INDEXERS if indexers is None else indexers)
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}

    def key(self, obj: Obj) -> str:
        return self._key_func(obj)

    # -- writes -------------------------------------------------------------------------------

    def add(self, obj: Obj) -> Obj | None:
        """Insert or replace; returns the previous object under that key."""
        key = self._key_func(obj)
        with self._lock:
            old = self._items.get(key)
            self._items[key] = obj
            self._update_indices(key, old, obj)
            return old

    update = add

    def delete(self, obj_or_key: Obj | str) -> Obj | None:
        key = obj_or_key if isinstance(obj_or_key, str) else self._key_func(obj_or_key)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._update_indices(key, old, None)
            return old

    def replace(self, objs: Iterable[Obj]) -> dict[str, Obj]:
        """Swap the whole content; returns the previous content keyed by key."""
        new = {self._key_func(o): o for o in objs}
        with self._lock:
            old = self._items
            self._items = new
            self._indices = {name: {} for name in self._indexers}
            for key, obj in new.items():
                self._update_indices(key, None, obj)
            return old

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        with self._lock:
            for name, fn in indexers.items():
                if name in self._indexers:
                    raise ValueError(f"indexer {name!r} already exists")
                self._indexers[name] = fn
                index: dict[str, set[str]] = {}
                for key, obj in self._items.items():
                    for value in fn(obj):
                        index.setdefault(value, set()).add(key)
                self._indices[name] = index

    def _update_indices(self, key: str, old: Obj | None, new: Obj | None) -> None:
        for name, fn in self._indexers.items():
            index = self._indices[name]
            old_values = fn(old) if old is not None else []
            new_values = fn(new) if new is not None else []
            if old_values == new_values:
                continue
            for value in old_values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
            for value in new_values:
                index.setdefault(value, set()).add(key)

    # -- reads --------------------------------------------------------------------------------

    def get_by_key(self, key: str) -> Obj | None:
        with self._lock:
            return self._items.get(key)

    def get(self, obj: Obj) -> Obj | None:
        return self.get_by_key(self._key_func(obj))

    def list(self) -> builtins.list[Obj]:
        with self._lock:
            return list(self._items.values())

    def list_keys(self) -> builtins.list[str]:
        with self._lock:
            return list(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]:
        with self._lock:
            if index_name not in self._indices:
                raise KeyError(f"no index named {index_name!r}")
            return sorted(self._indices[index_name].get(value, ()))

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        with self._lock:
            if index_name not in self._indices:
                raise KeyError(f"no index named {index_name!r}")
            return [self._items[k] for k in self._indices[index_name].get(value, ())]

    def index_names(self) -> builtins.list[str]:
        with self._lock:
            return list(self._indexers)

    def has_index(self, index_name: str) -> bool:
        return index_name in self._indexers
