"""The plugin's one error type: a single line for the user and the exit code to leave with.

Every failure a user can cause or meet (no kubeconfig, an unreachable API server, a refused
manifest, a missing job, an interrupted upload) is raised as `PluginError` with a message that
says what happened and, where there is one, what to do; `main` prints it as `error: <message>`
and exits with `code`. Anything else is a bug, and still ends as one line (see `main`).
"""

from __future__ import annotations


class PluginError(Exception):
    """A failure to report as one line (`message`) and a non-zero exit `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class ApiError(PluginError):
    """The API server answered with an error Status (`status` is the HTTP code)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409
