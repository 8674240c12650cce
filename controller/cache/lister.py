"""Listers: typed read access to an informer's cache (client-go's generated listers).

Reads never touch the API server. Objects returned are the frozen cached objects: read them,
`thaw()` a copy to change one. `list(namespace, selector)` costs what the objects it returns cost
when the informer has a label index (`store.label_index`) on one of the selector's labels; else it
scans the namespace.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping

from controller.cache.store import NAMESPACE_INDEX, Indexer, label_index_name
from controller.meta import Obj


def labels_match(obj: Obj, selector: Mapping[str, str] | None) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


class Lister:
    def __init__(self, indexer: Indexer) -> None:
        self.indexer = indexer

    def get(self, name: str, namespace: str | None = None) -> Obj | None:
        return self.indexer.get_by_key(f"{namespace}/{name}" if namespace else name)

    def list(
        self, namespace: str | None = None, selector: Mapping[str, str] | None = None
    ) -> builtins.list[Obj]:
        if namespace and selector:
            for label, value in selector.items():
                index = label_index_name(label)
                if self.indexer.has_index(index):
                    objs = self.indexer.by_index(index, f"{namespace}/{value}")
                    return [o for o in objs if labels_match(o, selector)]
        objs = self.indexer.by_index(NAMESPACE_INDEX, namespace) if namespace else self.indexer.list()
        return [o for o in objs if labels_match(o, selector)]

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        return self.indexer.by_index(index_name, value)
