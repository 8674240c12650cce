"""The plugin's one error type and its one-line messages.

Every failure a user can cause or meet (no kubeconfig, an unreachable API server, a refused
manifest, a missing job, an interrupted upload) ends as one line that says what happened and,
where there is one, what to do; `main` prints it as `error: <line>` and exits with its code.
The plugin raises `PluginError` (a line and an exit code); an error Status from the API server
is the REST layer's `ApiError`, which `api_error_line` words for the user. Anything else is a
bug, and still ends as one line (see `main`).
"""

from __future__ import annotations

from controller.rest.errors import ApiError


class PluginError(Exception):
    """A failure to report as one line (`message`) and a non-zero exit `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def api_error_line(exc: ApiError) -> str:
    """What the API server said, in its own words: the Status message; a 422 lists each field
    cause as `field: message` (what the user has to fix)."""
    if exc.invalid and exc.causes:
        fields = "; ".join(
            f"{c.get('field') or '(object)'}: {c.get('message', '')}".strip() for c in exc.causes
        )
        return f"the API server refused it: {fields}"
    return (exc.message or "").strip() or f"the API server answered HTTP {exc.status}"
