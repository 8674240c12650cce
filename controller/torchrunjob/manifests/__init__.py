"""Pure builders of everything a TorchrunJob is made of: spec in, manifest out, no I/O.

One module per object or concern: `worker` (the Indexed Job, built whole), `service`, `syncpod`,
`storage` (PVCs and the workers' mounts), `etcd` (the managed etcd of etcd-v2 rendezvous),
`podgroup` (the gang schedulers' PodGroups), `scheduling` (each scheduler's fields), `launch`
(the torchrun command line), `rendezvous`, `podresources` (what a worker pod asks for),
`tools` (the `/opt/torchrun` of every worker pod), `checkpoint` (what checkpoints add to it),
`progress` (the reporter sidecar), `inplace` (the supervisor's files for a job that restarts in
place), and `common` (names, labels, owner reference, placement).
Fragments are returned, never applied in place. An import contract (`.importlinter`) keeps this
package free of the REST client, the caches and the controller's I/O modules.
"""
