"""The controller scaffold: a rate-limited workqueue drained by a pool of worker threads."""

from controller.runtime.controller import Controller, Reconciler, Result

__all__ = ["Controller", "Reconciler", "Result"]
