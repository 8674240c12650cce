"""`prepare`: the first init container of every worker pod fills `/opt/torchrun` (docs/checkpoints.md).

The worker pod's design, whatever the workspace source (`none` included): an emptyDir
`torchrun-tools` at `/opt/torchrun`, filled by this init container, named `prepare`, from the
sync image, before the `workspace` copy (when there is one) and before any sidecar. A separate
container rather than the `workspace` copy extended, because the copy exists only for jobs whose
code comes through the workspace PVC, and because the two report differently (the copy's failure
is its log; `prepare` reports what it chose in its termination message).

What `prepare_tools(target, env)` guarantees:
- `target` holds a copy of the package's `controller/tools/` (the `launch` script, the helper
  modules under `python/`), without bytecode caches, and `python/torchrun_checkpoint_discovery.py`,
  a copy of `controller/checkpoint/discovery.py` (the checkpoint rules, for the helper);
- `target/env` holds one line `NAME=value` per variable, each value quoted for the POSIX shell
  (`shlex.quote`), written in one step (a reader never sees half of it); `launch` sources it.
  A name that is not a shell variable name is refused (`ValueError`), never written.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

from controller.sync.atomic import write_atomic

TOOLS = Path(__file__).resolve().parent.parent / "tools"
# the checkpoint rules, shipped beside the helpers for torchrun_checkpoint (standard library only)
DISCOVERY = Path(__file__).resolve().parent.parent / "checkpoint" / "discovery.py"
DISCOVERY_AS = "python/torchrun_checkpoint_discovery.py"
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
    """Copy `tools` into `target` and write `target/env` (module doc). `target` itself is left as
    it is (an emptyDir's mount point belongs to root: its mode and times are not ours to set);
    files are written 0644 (0755 when executable), directories 0755."""
    target.mkdir(parents=True, exist_ok=True)
    for source in sorted(tools.rglob("*")):
        rel = source.relative_to(tools)
        if "__pycache__" in rel.parts or source.suffix == ".pyc":
            continue
        dest = target / rel
        if source.is_dir():
            dest.mkdir(mode=0o755, exist_ok=True)
        else:
            shutil.copyfile(source, dest)
            dest.chmod(0o755 if os.access(source, os.X_OK) else 0o644)
    (target / DISCOVERY_AS).parent.mkdir(mode=0o755, exist_ok=True)
    shutil.copyfile(DISCOVERY, target / DISCOVERY_AS)
    (target / DISCOVERY_AS).chmod(0o644)
    write_atomic(target / ENV_FILE, env_text(env).encode("utf-8", "surrogateescape"))
