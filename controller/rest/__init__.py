"""The REST layer: raw-JSON requests to the Kubernetes API on the `kubernetes` package's config.

Guarantees: every call has a timeout; client-side QPS/burst limiting; transient failures
(connection errors, 429, 5xx) are retried with backoff, honouring Retry-After, and 4xx never are;
every request is counted by verb, resource and code. Objects are plain dicts, never generated
model objects (they are slow to build and hide unknown fields).

Layout, as client-go's `rest` package: `request` (sending one request: rate limit, write fence,
timeout, retry policy, metrics), `watch` (the watch stream), `client` (`RESTClient`, the verbs),
`errors` (`ApiError` from a `Status`), `config` (where the server is), `discovery` (is a
group/version served), `resources` (the built-in kinds' `Resource`s).
"""

from controller.meta import Resource
from controller.rest.client import RESTClient
from controller.rest.config import load_config
from controller.rest.errors import ApiError
from controller.rest.watch import WatchEvent

__all__ = ["ApiError", "RESTClient", "Resource", "WatchEvent", "load_config"]
