"""The REST layer: raw-JSON requests to the Kubernetes API on the `kubernetes` package's config.

Guarantees: every call has a timeout; client-side QPS/burst limiting; transient failures
(connection errors, 429, 5xx) are retried with backoff, honouring Retry-After, and 4xx never are;
every request is counted by verb, resource and code. Objects are plain dicts, never generated
model objects (they are slow to build and hide unknown fields).
"""

from controller.meta import Resource
from controller.rest.client import RESTClient, WatchEvent
from controller.rest.config import load_config
from controller.rest.errors import ApiError

__all__ = ["ApiError", "RESTClient", "Resource", "WatchEvent", "load_config"]
