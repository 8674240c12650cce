"""The REST layer: raw-JSON requests to the Kubernetes API, without the `kubernetes` package.

Guarantees: every call has a timeout; client-side QPS/burst limiting; transient failures
(connection errors, 429, 5xx) are retried with backoff, honouring Retry-After, and 4xx never are;
every request is counted by verb, resource and code. Objects are plain dicts, never generated
model objects (they are slow to build and hide unknown fields).

Layout, as client-go's `rest` package: `request` (sending one request: rate limit, write fence,
timeout, retry policy, metrics), `watch` (the watch stream), `client` (`RESTClient`, the verbs),
`errors` (`ApiError` from a `Status`), `config` (`ClusterConfig`: where the server is and how to
authenticate), `loading` (`load_config`: the `ClusterConfig` the flags select, in-cluster or from
kubeconfig files, which `kubeconfig` reads), `credentials` (the auth header per request: rotated
token files, exec plugins), `transport` (TLS and the pool), `discovery` (is a group/version
served), `resources` (the built-in kinds' `Resource`s).
"""

from controller.meta import Resource
from controller.rest.client import RESTClient
from controller.rest.config import ClusterConfig, ConfigError
from controller.rest.errors import ApiError
from controller.rest.loading import load_config
from controller.rest.watch import WatchEvent

__all__ = ["ApiError", "ClusterConfig", "ConfigError", "RESTClient", "Resource", "WatchEvent", "load_config"]
