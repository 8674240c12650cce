"""API errors as the API server reports them (a `Status` body), with client-go's predicates."""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    def __init__(
        self, status: int, body: bytes | str | dict[str, Any], verb: str = "", path: str = ""
    ) -> None:
        parsed: dict[str, Any] = {}
        if isinstance(body, dict):
            parsed = body
        else:
            try:
                loaded = json.loads(body or b"{}")
                parsed = loaded if isinstance(loaded, dict) else {}
            except ValueError:
                parsed = {"message": body.decode(errors="replace") if isinstance(body, bytes) else body}
        self.status = status
        self.reason: str = parsed.get("reason", "")
        self.message: str = parsed.get("message", "")
        self.details: dict[str, Any] = parsed.get("details") or {}
        self.body = parsed
        super().__init__(f"{verb} {path}: {status} {self.reason}: {self.message}".strip())

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        """The requested resourceVersion is too old (410 Gone / Expired): relist."""
        return self.status == 410 or self.reason in ("Expired", "Gone")

    @property
    def invalid(self) -> bool:
        return self.status == 422

    @property
    def transient(self) -> bool:
        return self.status == 429 or self.status >= 500


def status_error(obj: dict[str, Any]) -> ApiError:
    """The error carried by a watch ERROR event's Status object."""
    return ApiError(int(obj.get("code") or 500), obj)
