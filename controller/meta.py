"""Object metadata helpers every layer may use (apimachinery's `metav1` and `schema` in miniature).

`Resource` names a group/version/resource and builds its REST path.

Ownership is proven only by a *controller* owner reference with the owner's UID — the rule of
`metav1.GetControllerOf`/`IsControlledBy`. A label or a name proves nothing: users reuse both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base
