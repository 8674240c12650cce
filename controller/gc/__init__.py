"""The garbage collector thread (collector.py): orphans of deleted TorchrunJobs and pods stuck
terminating.
"""

from controller.gc.collector import GarbageCollector

__all__ = ["GarbageCollector"]
