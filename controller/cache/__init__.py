"""client-go's tools/cache in Python: reflector → store/indexer → shared informer → listers.

Guarantees:
- one SharedIndexInformer per (resource, namespace, selector) in a factory, shared by every
  controller that asks for it;
- the cache holds frozen objects (`frozen.FrozenDict`, tuples for lists): nobody can mutate a
  cached object by accident; `thaw()` returns a private mutable copy;
- handlers see add/update/delete in the order the API server sent them, each handler on its own
  thread so a slow one never blocks another; deletes missed during a relist arrive as
  `DeletedFinalStateUnknown` tombstones; a periodic resync replays the cache without API calls;
- `has_synced()` is true only once the initial list is in the cache and handed to handlers.

Layout, as client-go's: `reflector` (list-then-watch), `store` (the indexer), `informer` (one
reflector, many handlers), `factory` (one informer per resource, namespace and selector),
`lister` (read access), `transforms` (what is slimmed before caching), `frozen` (the immutable
objects), `optional` (informers for APIs that may not be served yet).
"""

from controller.cache.factory import SharedInformerFactory
from controller.cache.frozen import FrozenDict, freeze, same_json, thaw
from controller.cache.informer import DeletedFinalStateUnknown, EventHandler, SharedIndexInformer
from controller.cache.lister import Lister
from controller.cache.optional import OptionalInformers
from controller.cache.store import Indexer, meta_namespace_key

__all__ = [
    "DeletedFinalStateUnknown",
    "EventHandler",
    "FrozenDict",
    "Indexer",
    "Lister",
    "OptionalInformers",
    "SharedIndexInformer",
    "SharedInformerFactory",
    "freeze",
    "meta_namespace_key",
    "same_json",
    "thaw",
]
