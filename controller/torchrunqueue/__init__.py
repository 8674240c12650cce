"""The TorchrunQueue controller: validates queue templates and reports Ready and job counts."""

from controller.torchrunqueue.controller import TorchrunQueueReconciler

__all__ = ["TorchrunQueueReconciler"]
