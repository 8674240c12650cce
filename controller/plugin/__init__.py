"""`kubectl torchrun`: the researcher's command line (SPEC §8, docs/workspace.md).

Layout, one concept per module:
  * packing, pure: `ignore` (.gitignore/.torchrunignore rules), `secretfiles` (what looks like a
    credential), `pack` (scan a project, refusals), `archive` (the deterministic tar.gz + SHA-256);
  * the API: `kube` (kubeconfig like kubectl, raw JSON calls, one-line errors), `objects` (jobs,
    queues, pods, events), `upload` (`receive` over pods/exec), `watch` (waiting on conditions),
    `logs` (per rank, followed across pod replacements);
  * the commands: `submit`, `hotreload` (`sync`), `commands` (list, status, logs, suspend, resume,
    delete), built from `manifest`, `views` and `workspace`; `main` is the console script.
It imports the API types and nothing of the controller itself (the import contract's top layer).
"""
