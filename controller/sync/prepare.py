"""`prepare`: the first init container of every worker pod fills `/opt/torchrun` (docs/checkpoints.md).

The worker pod's design, whatever the workspace source (`none` included): an emptyDir
`torchrun-tools` at `/opt/torchrun`, filled by this init container, named `prepare`, from the
sync image, before the `workspace` copy (when there is one) and before any sidecar. A separate
container rather than the `workspace` copy extended, because the copy exists only for jobs whose
code comes through the workspace PVC, and because the two report differently (the copy's failure
is its log; `prepare` reports what it chose in its termination message).

What `prepare_tools(target, env)` guarantees:
- `target` holds a copy of the package's `controller/tools/` (the `launch` script, the helper
  modules under `python/`), without bytecode caches;
- `target/env` holds one line `NAME=value` per variable, each value quoted for the POSIX shell
  (`shlex.quote`), written in one step (a reader never sees half of it); `launch` sources it.
  A name that is not a shell variable name is refused (`ValueError`), never written.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

from controller.sync.atomic import write_atomic

TOOLS = Path(__file__).resolve().parent.parent / "tools"
ENV_FILE = "env"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_text(values: Mapping[str, str]) -> str:
    """The env file's content: `NAME=<shell-quoted value>` lines, in the mapping's order."""
    lines = []
    for name, value in values.items():
        if not _NAME.match(name):
            raise ValueError(f"not a shell variable name: {name!r}")
        lines.append(f"{name}={shlex.quote(value)}\n")
    return "".join(lines)


def prepare_tools(target: Path, env: Mapping[str, str], *, tools: Path = TOOLS) -> None:
    """Copy `tools` into `target` and write `target/env` (module doc)."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tools, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    write_atomic(target / ENV_FILE, env_text(env).encode("utf-8", "surrogateescape"))
