"""`kubectl torchrun`: the researcher's command line (SPEC §8, docs/workspace.md).

Layout, one concept per module:
  * packing, pure: `ignore` (.gitignore/.torchrunignore rules), `secretfiles` (what looks like a
    credential), `pack` (scan a project, refusals), `archive` (the deterministic tar.gz + SHA-256);
  * the API: `kube` (kubeconfig like kubectl; the controller's `RESTClient`), `objects` (jobs,
    queues, pods, events), `upload` (`receive` over pods/exec), `delta` (a hot reload's manifest
    and the files the workspace lacks, over pods/exec), `watch` (waiting on conditions),
    `logs` (per rank, followed across pod replacements);
  * the commands: `submit`, `hotreload` (`sync`), `rollout` (what `sync` waits for), `commands`
    (list, status, logs, suspend, resume, delete), `checkpoints`, `stack` (py-spy dumps through
    the reporter sidecar), built from `manifest`, `views`, `progressbar` and `workspace`; `main`
    is the console script, `console` where its output goes, `flags` turns its command-line
    mistakes into one line, `errors` every other failure.
The vocabulary is the controller's, never restated: paths from `meta.Resource` and the
`Resource`s of `api.resources`/`rest.resources`, the job read through `api.TorchrunJob`, error
Statuses as `rest.errors.ApiError`, the sync program's argv and names from `sync.protocol`. It
imports no controller logic (the import contract's top layer).
"""
