"""Checkpoints on a job's volume: which exist, which are complete, which to resume from and which
retention removes (docs/checkpoints.md).

Standard library only and nothing else from `controller`, like the sync program that runs it in
every worker's `prepare` init container (`python -m controller.sync prepare`); the controller
imports its report parser. The modules:
- `discovery`: `scan(root)` (never leaves the root, never follows links), completeness, the step
  in a name, `latest` — also shipped to the workers as `torchrun_checkpoint_discovery`;
- `retention`: `prune_plan` (pure) and `prune`;
- `start`: `resume`, one start's work — prune (rank 0), choose, re-check, answer env and report;
- `report`: rank 0's termination message and its parser;
- `listing`: what `kubectl torchrun checkpoints NAME` shows of a root.
"""

from controller.checkpoint.discovery import Entry, by_age, latest, scan
from controller.checkpoint.report import CheckpointReport, parse_report
from controller.checkpoint.retention import prune, prune_plan
from controller.checkpoint.start import ENV_RESUME, Resume, resume

__all__ = [
    "ENV_RESUME",
    "CheckpointReport",
    "Entry",
    "Resume",
    "by_age",
    "latest",
    "parse_report",
    "prune",
    "prune_plan",
    "resume",
    "scan",
]
