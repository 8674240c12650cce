"""The elastic autoscaler (SPEC §6, `--max-load-desired`): a leader-only thread that grows elastic
TorchrunJobs into free GPUs and shrinks them when the cluster's GPU load is above the target or
work waits as Unschedulable.

- `model`: the frozen snapshot the planner reads; `snapshot`: built from the caches;
- `planner`: pure, snapshot in, size changes out; `placement`: the dry run of scheduling;
- `autoscaler`: the periodic pass that applies a plan (`status.desiredNodes`, Events, metrics);
- `wiring`: the informers it reads; `resources`: node and pod amounts in integer units;
  `metrics`: its Prometheus metrics.
The worker Job follows `status.desiredNodes` in the TorchrunJob reconciler (torchrunjob/elastic.py).
"""

from controller.autoscaler.autoscaler import Autoscaler
from controller.autoscaler.planner import cluster_load, plan
from controller.autoscaler.wiring import new_autoscaler

__all__ = ["Autoscaler", "cluster_load", "new_autoscaler", "plan"]
