"""Errors that name the field they are about, like apimachinery's `field.Error`.

A `FieldError` prints as `spec.numGPUs: 12 GPUs do not divide ...`, the same shape the API server
uses for schema and CEL rejections, so users see one style of message whether the server or the
controller refused their object. `InvalidObjectError` carries a non-empty list of them; it is
a `controller.errors.PermanentError`, so the controllers report it in a status condition and do
not retry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.errors import PermanentError


@dataclass(frozen=True)
class FieldError:
    """One problem with one field; `path` is a dotted JSON path such as `spec.workspace.git.url`."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class InvalidObjectError(PermanentError):
    """An object the controller cannot act on; `errors` says which fields are wrong and why.

    A `PermanentError` with reason `InvalidSpec`: retrying cannot help until the user edits the
    object, so the runtime forgets the key and the reconciler reports `message` in a condition.
    """

    REASON = "InvalidSpec"

    def __init__(self, errors: Sequence[FieldError]) -> None:
        if not errors:
            raise ValueError("InvalidObjectError needs at least one FieldError")
        self.errors: tuple[FieldError, ...] = tuple(errors)
        super().__init__(self.REASON, "; ".join(str(e) for e in self.errors))


def join_path(parent: str, child: str) -> str:
    """`spec` + `numGPUs` → `spec.numGPUs`; list indexes are written by callers as `env[2]`."""
    return f"{parent}.{child}" if parent else child
