"""The TorchrunJob controller: the reconciler, its steps, and the pure logic they ask.

- `controller`: the reconciler, a list of steps (`steps`: each answers `Proceed` or a `Decision`
  that ends the pass); `wiring`: what enqueues a job; `updater`: per-job state not in the API.
- the steps' I/O: `children` (the objects a job owns, never another's: the one create-or-adopt
  path), `claims` (the PVCs), `generations` (sync pods, the code generation), `reload` (hot
  reload: the workers move to the generation in use), `managed_etcd`, `podgroups` (the gang's
  PodGroup), `kueue` (the Kueue Workload's `spec.active` follows suspend), `pod_admission` (would
  the namespace admit the workers: a dry run), `workers` (the worker Job of the attempt),
  `elastic`, `evictions`, `actions` (what a lifecycle decision asks), `start_evidence` (what
  `starting` reads), `progress` (the reports → `status.progress`, `Progressing`, a stall),
  `inplace` (a failure the supervisors told → a restart in place), `disruption` (a disrupted rank
  on the recreate path → a new attempt at once, uncounted);
- the pure decisions: `admission` (may the job run on its queue), `lifecycle` (deadline, TTL,
  finished, restart or fail), `status`, `starting` (why workers do not run yet), `checkpoints`
  (`status.checkpoint`), `goodput` (the `status.goodput` ledger folded at each status write);
- what the user reads: `reporter` (the status, written once per pass, and Events), `metrics`;
- `manifests/`: the pure builders, spec in, manifest out.
"""
