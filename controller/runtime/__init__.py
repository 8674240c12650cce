"""The controller scaffold: a rate-limited workqueue drained by a pool of worker threads
(controller.py), the Events it records (events.py) and the status writes it makes (status.py:
only when changed, a conflict as a clean retry).
"""

from controller.runtime.controller import Controller, Reconciler, Result

__all__ = ["Controller", "Reconciler", "Result"]
