"""The TorchrunJob that `submit` creates, built from its flags (pure: flags in, dict out).

The job says only what is the researcher's: queue, size (`--nodes` → `numNodes`, or `--gpus` →
the legacy `numGPUs`, which the controller turns into whole nodes), the command exactly as typed,
`workspace.source: upload` and the `--env` variables as `spec.overrides.env` (a list of
`{name, value}`, which the queue must allow: `env` in its `allowOverrides`). Without `--name`
the server picks a unique name from the directory's (`metadata.generateName`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controller.api import API_VERSION, JOB_KIND
from controller.api.torchrunjob import MAX_JOB_NAME_LENGTH
from controller.plugin.errors import PluginError

_GENERATED_SUFFIX = 5  # the API server's generateName suffix
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class SubmitSpec:
    """What `submit` was asked for."""

    queue: str
    command: str
    nodes: int | None = None
    gpus: int | None = None
    name: str | None = None
    env: tuple[tuple[str, str], ...] = ()


def parse_env(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`--env K=V` values as pairs (the last of a repeated name wins); `PluginError` if one is
    not `NAME=value`."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise PluginError(f"--env {item!r}: want NAME=value with NAME a variable name")
        out[name] = value
    return tuple(out.items())


def command_text(words: Sequence[str]) -> str:
    """The command as one string: a single quoted argument verbatim, several words (after `--`)
    joined with shell quoting so the controller splits them back identically."""
    return words[0] if len(words) == 1 else shlex.join(words)


def generate_name(directory: str) -> str:
    """A `generateName` prefix from a directory name: a DNS-1035 label start, ending in `-`."""
    base = re.sub(r"[^a-z0-9-]+", "-", directory.lower()).strip("-")
    if not base or not base[0].isalpha():
        base = "job-" + base if base else "job"
    base = base[: MAX_JOB_NAME_LENGTH - _GENERATED_SUFFIX - 1].rstrip("-")
    return base + "-"


def job_manifest(spec: SubmitSpec, directory: str) -> dict[str, Any]:
    """The TorchrunJob to create; see the module docstring."""
    metadata: dict[str, Any] = (
        {"name": spec.name} if spec.name else {"generateName": generate_name(directory)}
    )
    body: dict[str, Any] = {"jobQueue": spec.queue, "command": spec.command}
    if spec.nodes is not None:
        body["numNodes"] = spec.nodes
    if spec.gpus is not None:
        body["numGPUs"] = spec.gpus
    body["workspace"] = {"source": "upload"}
    if spec.env:
        body["overrides"] = {"env": [{"name": k, "value": v} for k, v in spec.env]}
    return {"apiVersion": API_VERSION, "kind": JOB_KIND, "metadata": metadata, "spec": body}
