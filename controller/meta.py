"""Object metadata helpers every layer may use (apimachinery's `metav1` and `schema` in miniature).

`Resource` names a group/version/resource and builds its REST path. Every API path is built here,
by `api_path`, and every segment of it escaped: a name read from an object (an owner reference, a
label, a user's argument) is exactly one segment on the wire, or the path is refused
(`InvalidPathSegmentError`) before anything is sent — it never adds a segment, a query or a fragment,
and never climbs out of its resource's path.

Ownership is proven only by a *controller* owner reference with the owner's UID — the rule of
`metav1.GetControllerOf`/`IsControlledBy`. A label or a name proves nothing: users reuse both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

Obj = Mapping[str, Any]


def controller_of(obj: Obj) -> Mapping[str, Any] | None:
    """The object's controller owner reference (`controller: true`), if it has one."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def is_controlled_by(obj: Obj, uid: str) -> bool:
    """True only when the object's controller owner reference carries exactly this UID."""
    ref = controller_of(obj)
    return ref is not None and bool(uid) and ref.get("uid") == uid


class InvalidPathSegmentError(ValueError):
    """A value that no escaping makes one API path segment; nothing was sent."""

    def __init__(self, value: str) -> None:
        super().__init__(f"{value!r} cannot be one segment of an API path")
        self.value = value


_DOT_SEGMENTS = ("", ".", "..")


def path_segment(value: str) -> str:
    """`value` as one path segment: every character but RFC 3986's unreserved ones
    percent-encoded (`?`, `#`, `%`, spaces and non-ASCII included).

    Refused, like client-go's `IsValidPathSegmentName`: "", "." and "..", which mean the
    collection, here and up whatever their encoding, and any value with a "/" — the API server
    decodes `%2F` before it splits the path, so `x/status` would still reach the status."""
    if value in _DOT_SEGMENTS or "/" in value:
        raise InvalidPathSegmentError(value)
    return quote(value, safe="")


def api_path(*segments: str) -> str:
    """The absolute path of these segments, each one escaped by `path_segment`."""
    return "".join("/" + path_segment(s) for s in segments)


def group_version_path(api_version: str) -> str:
    """The discovery path of an apiVersion: `/api/v1` for the core group, `/apis/<g>/<v>` else."""
    group, _, version = api_version.rpartition("/")
    return api_path("apis", group, version) if group else api_path("api", version)


@dataclass(frozen=True)
class Resource:
    """A GroupVersionResource with its kind: enough to build a request path."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """A short name for logs and metric labels: `pods`, `jobs.batch`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The collection's path (all namespaces without `namespace`), or the named object's, or
        its subresource's; each segment escaped (`api_path`). A `name` of "" is refused, not
        read as the collection."""
        segments = ["apis", self.group, self.version] if self.group else ["api", self.version]
        if self.namespaced and namespace:
            segments += ["namespaces", namespace]
        segments.append(self.plural)
        if name is not None:
            segments.append(name)
            if subresource:
                segments.append(subresource)
        return api_path(*segments)


@dataclass(frozen=True)
class GroupKind:
    """An API group and kind, as an owner reference names them (any version)."""

    group: str
    kind: str

    def named_by(self, ref: Mapping[str, Any] | None) -> bool:
        """True when owner reference `ref` points at this group and kind."""
        if ref is None or ref.get("kind") != self.kind:
            return False
        api_version = str(ref.get("apiVersion", ""))
        return (api_version.split("/", maxsplit=1)[0] if "/" in api_version else "") == self.group


@dataclass(frozen=True)
class Owner:
    """The object another one provably belongs to: namespace, name and UID."""

    namespace: str
    name: str
    uid: str


def resolve_owner(
    obj: Obj, owner: GroupKind, via: GroupKind, get_via: Callable[[str, str], Obj | None]
) -> Owner | None:
    """The `owner`-kind object that controls `obj`: named by `obj`'s controller reference, or by
    the controller reference of the `via`-kind object that controls `obj` — read with
    `get_via(namespace, name)` and accepted only if its UID is the one referenced (client-go's
    `resolveControllerRef`). None when neither proves it."""
    ns = obj["metadata"].get("namespace", "")
    ref = controller_of(obj)
    if ref is not None and owner.named_by(ref):
        return Owner(ns, ref["name"], ref["uid"])
    if ref is None or not via.named_by(ref):
        return None
    middle = get_via(ns, ref["name"])
    if middle is None or middle["metadata"].get("uid") != ref.get("uid"):
        return None
    return resolve_owner(middle, owner, GroupKind("", ""), lambda _ns, _name: None)
