"""Object metadata helpers every layer may use (apimachinery's `metav1` in miniature).

Ownership is proven only by a *controller* owner reference with the owner's UID — the rule of
`metav1.GetControllerOf`/`IsControlledBy`. A label or a name proves nothing: users reuse both.
"""

from __future__ import annotations

from collections.abc import Mapping
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
