"""The controller's error taxonomy: what a reconcile may raise and what the runtime does with it.

- `PermanentError`: the object is invalid or cannot be acted on until a human changes it. The
  reconciler reports it in a status condition; the runtime forgets the key (no retry).
- `TransientError`: try again later; `requeue_after` (seconds) overrides the rate limiter.
- Anything else is treated as transient and retried with the rate limiter's backoff.
"""

from __future__ import annotations


class PermanentError(Exception):
    """Retrying will not help; the reason and message belong in a condition."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class TransientError(Exception):
    """Retry later; after `requeue_after` seconds if given, else with backoff."""

    def __init__(self, message: str, requeue_after: float | None = None) -> None:
        super().__init__(message)
        self.requeue_after = requeue_after
