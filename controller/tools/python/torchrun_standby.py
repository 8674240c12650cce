"""A torchrun started ahead of its generation: the supervisor's standby (docs/design/recovery.md).

Importing torch is most of torchrun's own start (3.6 s of a hot reload's 13.9 s on the real node).
The supervisor (`torchrun_supervisor.py`) keeps one of these waiting while a generation runs, so
the next generation's torchrun has its modules loaded when it is asked for:

    <torchrun's python> torchrun_standby.py <fd> <delay seconds> <torchrun's script>

What it guarantees:

- **It runs nothing of its own until told.** It waits on `fd` (a pipe from the supervisor). Once
  `delay` seconds passed without an order, it imports what the script will import: the modules it
  imports at its top level (pip's console script: `from torch.distributed.run import main`) and
  the module of the entry point an easy-install script names in its header (Debian's
  `/usr/bin/torchrun`: `EASY-INSTALL-ENTRY-SCRIPT: 'torch==2.6.0+debian','console_scripts',
  'torchrun'`, which it loads through `importlib.metadata`), and nothing else; an import that fails
  is left for the run to fail as it would have. EOF on `fd` (the supervisor discards it, or is
  gone) ends it with 0 having run nothing.
- **It runs the script as `python <script> <args>` would.** The order is one JSON line
  `{"args": [...], "env": {...}}`: the environment becomes `env` exactly (every variable not in it
  removed), `sys.argv` is `[script, *args]`, `sys.path[0]` the script's directory (symlinks
  resolved, as Python sets it), and the script runs as `__main__`; its exit (SystemExit, an
  exception's traceback and 1) is the process's. The interpreter, the working directory, stdin,
  stdout and stderr are the supervisor's, as for a torchrun it starts itself; the variables read at
  the interpreter's start are the same (the supervisor starts it with the generation's environment
  less `TORCHRUN_IN_PLACE_GENERATION`, the one variable that differs between generations, which no
  interpreter or import reads).
- Standard library only, as every in-pod helper.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import json
import os
import re
import runpy
import select
import sys


def top_level_imports(source: str) -> list[str]:
    """The modules `source` imports at its top level (not inside a function or a branch), in
    order, each once; [] when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        found.extend(name for name in names if name not in found)
    return found


EASY_INSTALL = re.compile(r"^# EASY-INSTALL-ENTRY-SCRIPT: '([^'=]+)[^']*','([^']+)','([^']+)'$", re.MULTILINE)


def entry_point_modules(source: str) -> list[str]:
    """The module of the entry point an easy-install script's header names (module doc); [] for
    any other script, or when its distribution does not declare it."""
    header = EASY_INSTALL.search(source)
    if header is None:
        return []
    dist, group, name = header.groups()
    try:
        points = importlib.metadata.distribution(dist).entry_points
    except Exception:
        return []
    return [point.module for point in points if point.group == group and point.name == name][:1]


def warm(script: str) -> None:
    """Import what `script` will import (module doc); never raises."""
    try:
        with open(script, encoding="utf-8") as f:
            source = f.read(1 << 20)
    except (OSError, UnicodeDecodeError):
        return
    for name in top_level_imports(source) + entry_point_modules(source):
        try:
            importlib.import_module(name)
        except Exception:  # the run itself fails on it, as it would have
            continue


def read_order(fd: int, delay: float, script: str) -> dict[str, object] | None:
    """The supervisor's order, warming up once `delay` passed without one; None at EOF or on a
    malformed order."""
    with os.fdopen(fd, "rb") as pipe:
        ready, _, _ = select.select([pipe], [], [], max(delay, 0.0))
        if not ready:
            warm(script)
        line = pipe.readline()
    try:
        order = json.loads(line) if line else None
    except ValueError:
        return None
    return order if isinstance(order, dict) else None


def main(argv: list[str]) -> int:
    fd, delay, script = int(argv[0]), float(argv[1]), argv[2]
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    order = read_order(fd, delay, script)
    if order is None:
        return 0
    env, args = order.get("env"), order.get("args")
    if not isinstance(env, dict) or not isinstance(args, list):
        return 0
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    sys.argv = [script, *(str(a) for a in args)]
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
