"""The TorchrunQueue controller: validates queue templates and reports Ready and job counts.

controller.py is the reconciler, wiring.py says what enqueues a queue, kaiqueue.py is the
KAI-Scheduler Queue a queue of that scheduler gets.
"""

from controller.torchrunqueue.controller import TorchrunQueueReconciler

__all__ = ["TorchrunQueueReconciler"]
