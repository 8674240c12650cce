"""The garbage collector thread: orphans of deleted TorchrunJobs and pods stuck terminating."""

from controller.gc.collector import GarbageCollector

__all__ = ["GarbageCollector"]
