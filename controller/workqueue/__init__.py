"""Work queues for controllers: a Python mirror of client-go's `util/workqueue`.

A queue holds keys of objects that need reconciling and hands them to worker threads. Every
queue here is:

- fair: items are handed out in the order they were added (FIFO);
- stingy: an item added many times before it is processed is processed only once, and an item
  is never processed by two workers at the same time;
- shared: any number of producers may `add` and any number of consumers may `get` concurrently;
- deferring: an item added again while it is being processed is queued again only when its
  worker calls `done`, so the new add is never lost and never runs concurrently;
- shut down cleanly: after `shut_down` adds are ignored, getters are woken, the remaining items
  are still handed out and then `get` returns `(None, True)`; `shut_down_with_drain` also waits
  for the items being processed to be done.

Layers, as in client-go: `Queue` (queue.py) ← `DelayingQueue` adds `add_after` (delaying.py) ←
`RateLimitingQueue` adds `add_rate_limited`/`forget`/`num_requeues` (rate_limiting.py), with the
limiters in rate_limiters.py and metrics in metrics.py. Clock and metrics provider are injected;
a queue named "" records no metrics.

The consumer loop (sample-controller's `processNextWorkItem`)::

    key, shutdown = queue.get()
    if shutdown:
        return False
    try:
        sync(key)
        queue.forget(key)
    except Exception:
        queue.add_rate_limited(key)
    finally:
        queue.done(key)
"""

from controller.workqueue.delaying import DelayingQueue
from controller.workqueue.metrics import (
    NOOP_METRICS_PROVIDER,
    CounterMetric,
    GaugeMetric,
    HistogramMetric,
    MetricsProvider,
    NoopMetricsProvider,
    SettableGaugeMetric,
)
from controller.workqueue.queue import Queue
from controller.workqueue.rate_limiters import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
    default_item_based_rate_limiter,
)
from controller.workqueue.rate_limiting import RateLimitingQueue

__all__ = [
    "NOOP_METRICS_PROVIDER",
    "BucketRateLimiter",
    "CounterMetric",
    "DelayingQueue",
    "GaugeMetric",
    "HistogramMetric",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "MaxOfRateLimiter",
    "MetricsProvider",
    "NoopMetricsProvider",
    "Queue",
    "RateLimiter",
    "RateLimitingQueue",
    "SettableGaugeMetric",
    "default_controller_rate_limiter",
    "default_item_based_rate_limiter",
]
