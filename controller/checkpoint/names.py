"""What a checkpoint's name says: its step (docs/checkpoints.md).

`step_of(name)` reads the step from the names training libraries and people give checkpoints:
`step-1200`, `step_1200`, `step1200`, `checkpoint-1200` (Hugging Face Trainer),
`global_step1200` (DeepSpeed), `epoch=3-step=1200` (Lightning), `run-a-step-1200`: a word `step`,
`checkpoint` or `global_step` at the start of the name or after `-`/`_`, optionally followed by
`-`, `_` or `=`, then the digits ending the name. Anything else has no step (None). Pure.
"""

from __future__ import annotations

import re

_STEP = re.compile(r"(?:^|[-_])(?:global_step|step|checkpoint)[-_=]?([0-9]{1,18})\Z")
_HF = re.compile(r"^checkpoint-[0-9]{1,18}\Z")


def step_of(name: str) -> int | None:
    """The step in a checkpoint's name, or None (module doc)."""
    match = _STEP.search(name)
    return int(match.group(1)) if match else None


def is_hf_name(name: str) -> bool:
    """A Hugging Face Trainer checkpoint's name: `checkpoint-<step>`."""
    return _HF.match(name) is not None
