"""Where things live: the workspace layout of docs/workspace.md and the environment that locates it.

One home for these names: the controller and the plugin import them from here (this package sits
in the bottom layer and imports nothing else from `controller`).

    <workspace>/CURRENT                      newest complete generation, "G\\n", written last
    <workspace>/generations/<G>/             a generation's tree
    <workspace>/generations/<G>/.sync_success  its marker (JSON), written after the rename
    <workspace>/generations/<G>.failed       a refused generation (JSON {"reason", "message"})
    <workspace>/generations/.tmp-<G>-<rand>/ being filled; never read
    <workspace>/generations/.current.lock    held while CURRENT is read and replaced
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CURRENT = "CURRENT"
GENERATIONS = "generations"
MARKER = ".sync_success"
FAILED_SUFFIX = ".failed"
TMP_PREFIX = ".tmp-"
CURRENT_LOCK = ".current.lock"  # in generations/, held while CURRENT is read and replaced

ENV_WORKSPACE = "TORCHRUN_WORKSPACE"
ENV_SOURCE_DIR = "TORCHRUN_SOURCE_DIR"
ENV_SOURCE_SECRET_DIR = "TORCHRUN_SOURCE_SECRET_DIR"
ENV_TERMINATION_LOG = "TORCHRUN_TERMINATION_LOG"

DEFAULT_WORKSPACE = "/workspace"
DEFAULT_SOURCE_DIR = "/source"
DEFAULT_SOURCE_SECRET_DIR = "/var/run/secrets/torchrun.ai/source"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"


def env_path(env: Mapping[str, str], name: str, default: str) -> Path:
    """The path in environment variable `name`, or `default` when unset or empty."""
    return Path(env.get(name) or default)


def workspace_from(env: Mapping[str, str] = os.environ) -> Path:
    return env_path(env, ENV_WORKSPACE, DEFAULT_WORKSPACE)


def generations_dir(workspace: Path) -> Path:
    return workspace / GENERATIONS


def generation_dir(workspace: Path, generation: int) -> Path:
    return generations_dir(workspace) / str(generation)


def marker_path(workspace: Path, generation: int) -> Path:
    return generation_dir(workspace, generation) / MARKER


def failed_path(workspace: Path, generation: int) -> Path:
    return generations_dir(workspace) / f"{generation}{FAILED_SUFFIX}"


def current_path(workspace: Path) -> Path:
    return workspace / CURRENT


def read_current(workspace: Path) -> int | None:
    """The generation CURRENT names, or None when it is absent or unreadable."""
    try:
        text = current_path(workspace).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
