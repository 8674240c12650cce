"""torchrun-controller: a Kubernetes operator that runs distributed PyTorch training with torchrun.

Layers, highest first (enforced by import-linter, see .importlinter):
  cmd/, plugin/                   programs: `torchrun-controller` and `kubectl torchrun`
  torchrunjob/, torchrunqueue/,   the controllers, the garbage collector and the elastic
  gc/, autoscaler/                autoscaler
  progress/                       training progress: the leader's endpoint, store and stall
                                  decision; progress/sidecar/ runs in every worker pod
  runtime/, leaderelection/       the worker-pool controller scaffold and leader election
  cache/, workqueue/              client-go's informers and workqueue
  rest/                           the REST client (urllib3, kubeconfig read here), raw JSON
  metrics/, log.py                observability
  api/                            the torchrun.ai/v1alpha1 types
  flowcontrol.py, backoff.py      the token bucket and jittered backoff
  clock.py, errors.py, meta.py,   small shared primitives; the sync program (standard library
  sync/                           only)
  checkpoint/, pods.py            the checkpoint rules; what a pod's manifest says (client-go's
                                  podutil), on the standard library alone
`httpserve.py` (the bounded HTTP server every listener of ours uses) is in no layer. The
`controller/tools/` folder is not a package: files `sync/prepare.py` copies into every worker pod.
"""

__version__ = "0.1.0"
