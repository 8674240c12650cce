"""API errors as the API server reports them (a `Status` body), with client-go's predicates."""

from __future__ import annotations

import json
from typing import Any

from controller.errors import TransientError


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        body: bytes | str | dict[str, Any],
        verb: str = "",
        path: str = "",
        *,
        retry_after: float | None = None,
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
        # seconds from the response's Retry-After header: the server asks us to try again then
        self.retry_after = retry_after
        super().__init__(f"{verb} {path}: {status} {self.reason}: {self.message}".strip())

    @property
    def causes(self) -> list[dict[str, Any]]:
        """The Status's `details.causes`: for a 422, one per refused field (`field`, `message`)."""
        causes = self.details.get("causes")
        return [c for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []

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
        """Worth trying again later (throttled or a server error); whether the REST client itself
        retries also depends on the verb and on Retry-After (see `rest.client.is_retryable`)."""
        return self.status == 429 or self.status >= 500


def status_error(obj: dict[str, Any]) -> ApiError:
    """The error carried by a watch ERROR event's Status object."""
    return ApiError(int(obj.get("code") or 500), obj)


class LeadershipLostError(TransientError):
    """The write fence refused a write: this replica no longer (provably) holds the Lease.

    Nothing was sent. A reconcile that meets it is retried only by whoever leads next.
    """

    def __init__(self, verb: str, path: str) -> None:
        super().__init__(f"{verb} {path}: not sent, this replica is no longer the leader")
        self.verb = verb
        self.path = path
