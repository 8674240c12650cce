"""The identity of the torchrun.ai/v1alpha1 API: group, version, kinds and resource names.

Everything that names our resources (REST paths, informers, owner references, the CRD generator)
reads these constants, so a rename happens in one place.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "torchrun.ai"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

QUEUE_KIND: Final = "TorchrunQueue"
QUEUE_PLURAL: Final = "torchrunqueues"
QUEUE_SINGULAR: Final = "torchrunqueue"
QUEUE_SHORT_NAME: Final = "tq"

JOB_KIND: Final = "TorchrunJob"
JOB_PLURAL: Final = "torchrunjobs"
JOB_SINGULAR: Final = "torchrunjob"
JOB_SHORT_NAME: Final = "tj"

# `kubectl get torchrun` lists both kinds.
CATEGORY: Final = "torchrun"
