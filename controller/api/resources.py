"""REST descriptors of the two kinds, for clients and informers."""

from __future__ import annotations

from controller.api.groupversion import GROUP, JOB_KIND, JOB_PLURAL, QUEUE_KIND, QUEUE_PLURAL, VERSION
from controller.rest.resources import Resource

TORCHRUNJOBS = Resource(GROUP, VERSION, JOB_PLURAL, JOB_KIND, namespaced=True)
TORCHRUNQUEUES = Resource(GROUP, VERSION, QUEUE_PLURAL, QUEUE_KIND, namespaced=False)
