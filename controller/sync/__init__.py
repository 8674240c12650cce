"""The sync program: moves a job's code into a workspace generation (`python -m controller.sync`).

Self-contained (standard library only, nothing else from `controller` but the equally
self-contained `controller.checkpoint`), so the controller and the
plugin can import its constants (`layout`, `errors`) and its termination-message parser, and so it
can run in any image with Python. docs/workspace.md is the contract; the modules:

- `errors`: `SyncError(reason, message)` and the CamelCase reasons.
- `layout`: the workspace layout and the environment variables that locate it.
- `limits`: `Limits`, `Stats` and the `Tally` that enforces them.
- `names`, `tarheader`, `gunzip`, `prefetch`, `archive`: checking and extracting a tar.gz as it
  streams in (decompression read ahead in a thread).
- `tree`: `check_tree`, the same checks for a tree already on disk (git, s3 prefix, pvc).
- `generations`: `publish` (temp dir, rename, marker, CURRENT; `<G>.failed` on failure), with
  `atomic`'s one-step small-file writes and `remove`'s (no recursion, no symlinks followed).
- `upload`: `receive`, exactly N bytes from stdin with a SHA-256.
- `pid1`: `fetch --source upload`, the container's first process, lets the exec'd `receive` or
  `delta` exit before it does (its exit would SIGKILL them).
- `manifest`, `chunks`, `delta`: a hot reload's delta — the tree's manifest and digest, content-
  defined chunks and the ops that rebuild a changed file, and `delta`, which publishes a tree from
  the newest generation plus only what it lacked.
- `copy`: the workers' init container (wait for CURRENT, copy the tree).
- `termination`: the result as a termination message, and its parser for the controller.
- `request`: `FetchRequest`, what `fetch` hands the source modules in `sources/`.
- `prepare`: every worker's first init container fills `/opt/torchrun` (tools, env file).
- `checkpoint_s3`: the S3 mirror of a job's checkpoints.
- `cli`: the command line; `protocol`: its calling half, how the controller and the plugin run it.
"""

from controller.sync.archive import extract_archive
from controller.sync.errors import SyncError
from controller.sync.generations import Marker, publish, read_failure, read_marker, record_failure
from controller.sync.limits import Limits, Stats
from controller.sync.request import FetchRequest
from controller.sync.termination import SyncResult, parse_termination_message, write_termination_message
from controller.sync.tree import check_tree

__all__ = [
    "FetchRequest",
    "Limits",
    "Marker",
    "Stats",
    "SyncError",
    "SyncResult",
    "check_tree",
    "extract_archive",
    "parse_termination_message",
    "publish",
    "read_failure",
    "read_marker",
    "record_failure",
    "write_termination_message",
]
