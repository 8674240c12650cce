"""The test bed's node agent: a stand-in for a kubelet and a storage provisioner, nothing more.

kwok fakes the lifecycle of every pod on the fake GPU nodes; a few things the project must test
need more than a fake lifecycle. This agent adds exactly those, on loopback, with local
processes and directories under the run directory:

- **storage** (`provisioner.py`): the default StorageClass `standard` (provisioner
  `testbed.torchrun.ai/hostpath`, installed by `hack/controlplane.sh up`) gets one hostPath
  PersistentVolume per claim, a directory `$RUN_DIR/volumes/<pv>`, pre-bound by `claimRef` so
  kube-controller-manager's PV binder binds it; a Released volume of ours is deleted with its
  directory. A claim naming a class that does not exist is left alone: it stays Pending.
- **sync pods** (`syncpods.py`, label `torchrun.ai/role=sync`, on a kwok node): the container's
  command runs as a local process, `python` being the test bed's virtualenv (so
  `python -m controller.sync` is this checkout's). Volumes map to host directories
  (`podfiles.py`), paths in the environment and arguments are rewritten to them, and the exit
  is reported in the pod's status as a kubelet would (phase, terminated state, termination
  message). A kwok `Exec` named after the pod runs `kubectl exec` commands with the same
  environment and directories, and a kwok `Logs` serves the process's output (CRI format) to
  `kubectl logs`.
- **worker pods** (`torchrun.ai/role=worker`, on a kwok node): a CRI log file with a few lines
  (annotation `kwok.torchrun.ai/logs`, else one line naming the pod) and a `Logs` object.

It is not a kubelet: no containers, images, isolation, resource limits, probes or restarts; a
sync process sees the host (only paths are mapped). The real node of SPEC §10 replaces it for
tests that need real containers.
"""
