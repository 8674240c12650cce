"""torchrun-controller: a Kubernetes operator that runs distributed PyTorch training with torchrun.

Layers, lowest first (enforced by import-linter, see .importlinter):
  clock, errors, flowcontrol      small shared primitives; pods: what a pod's manifest says
                                  (client-go's podutil), on the standard library alone
  metrics, log                    observability
  rest                            the REST client (urllib3, kubeconfig read here), raw JSON
  workqueue, cache                client-go's workqueue and informers
  leaderelection, runtime         leader election and the worker-pool controller scaffold
  api                             the torchrun.ai/v1alpha1 types
  torchrunqueue, torchrunjob, gc  the controllers
  cmd, plugin, sync               programs
"""

__version__ = "0.1.0"
