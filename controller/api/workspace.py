"""Where a job's code comes from: `spec.workspace`.

`upload` (the default; `zip`, the seed's name, is accepted and read as `upload`) waits for the
archive `kubectl torchrun submit` uploads; `git`, `s3` and `pvc` (an existing claim that holds the
code) are fetched by the sync pod the same way. All four land in the job's workspace PVC, from
which every node copies the code to `mountPath`; `none` means the code is in the image.
Each source has exactly its own sub-object: CEL rejects `git:` without `source: git` and the
reverse, naming the field.

The seed's spelling, `volumes.workspace {enabled, source}` (`SeedWorkspace`), is a deprecated
alias: `TorchrunJobSpec.workspace` converts it with `SeedWorkspace.as_workspace`, the one place it
is read; the controller warns with an Event naming the field to write instead, and CEL refuses
both spellings at once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from controller.api.core import NAME_SCHEMA, PATH_SCHEMA
from controller.api.fields import Rule, api, cel


class WorkspaceSource(str, enum.Enum):
    UPLOAD = "upload"
    GIT = "git"
    S3 = "s3"
    PVC = "pvc"
    NONE = "none"


@dataclass(frozen=True)
class GitSource:
    """A git repository the sync pod clones."""

    url: str = field(
        metadata=api(
            "Clone URL: https://, http://, ssh://, git:// or user@host:path.",
            schema={
                "maxLength": 2048,
                "pattern": r"^((https?|ssh|git)://|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:)[^\s]+$",
            },
        )
    )
    ref: str | None = field(
        default=None,
        metadata=api("Branch, tag or commit; the default branch when absent.", schema={"maxLength": 255}),
    )
    secret: str | None = field(
        default=None,
        metadata=api(
            "Secret in the job's namespace with credentials (kubernetes.io/ssh-auth or basic-auth).",
            schema=NAME_SCHEMA,
        ),
    )


@dataclass(frozen=True)
class S3Source:
    """An object (archive) or prefix in S3 the sync pod downloads."""

    uri: str = field(
        metadata=api(
            "s3://bucket/key of an archive, or s3://bucket/prefix/ of a directory.",
            schema={"maxLength": 2048, "pattern": r"^s3://[a-z0-9][-a-z0-9.]{1,61}[a-z0-9](/.*)?$"},
        )
    )
    secret: str | None = field(
        default=None,
        metadata=api(
            "Secret in the job's namespace with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally "
            "AWS_ENDPOINT_URL; the pod's own credentials when absent.",
            schema=NAME_SCHEMA,
        ),
    )


@cel(
    Rule(
        "!has(self.subPath) || "
        "(!self.subPath.startsWith('/') && !self.subPath.split('/').exists(p, p == '..'))",
        "subPath must be a relative path without '..'",
        field_path=".subPath",
    )
)
@dataclass(frozen=True)
class PVCSource:
    """An existing PVC in the job's namespace that holds the code; the sync pod copies it in."""

    claim_name: str = field(metadata=api("Name of the PVC in the job's namespace.", schema=NAME_SCHEMA))
    sub_path: str | None = field(
        default=None, metadata=api("Directory inside the PVC.", schema={"maxLength": 1024})
    )


def _source_rules(source: WorkspaceSource) -> tuple[Rule, Rule]:
    name = source.value
    return (
        Rule(
            f"self.source != '{name}' || has(self.{name})",
            f"source {name} needs workspace.{name}",
            field_path=f".{name}",
            reason="FieldValueRequired",
        ),
        Rule(
            f"!has(self.{name}) || self.source == '{name}'",
            f"workspace.{name} is only allowed with source {name}",
            field_path=f".{name}",
            reason="FieldValueForbidden",
        ),
    )


@cel(
    *_source_rules(WorkspaceSource.GIT),
    *_source_rules(WorkspaceSource.S3),
    *_source_rules(WorkspaceSource.PVC),
)
@dataclass(frozen=True)
class Workspace:
    """Where the code comes from; it is copied to a local volume on every node at mountPath."""

    source: WorkspaceSource = field(
        default=WorkspaceSource.UPLOAD,
        metadata=api(
            "upload (kubectl torchrun submit uploads the local directory; zip is an accepted alias), "
            "git, s3, pvc or none (the code is in the image).",
            aliases={"zip": WorkspaceSource.UPLOAD.value},
        ),
    )
    git: GitSource | None = field(default=None, metadata=api("The repository, for source git."))
    s3: S3Source | None = field(default=None, metadata=api("The S3 location, for source s3."))
    pvc: PVCSource | None = field(default=None, metadata=api("The PVC, for source pvc."))
    mount_path: str = field(
        default="/app", metadata=api("Where the code is on every node.", schema=PATH_SCHEMA)
    )
    generation: int = field(
        default=0,
        metadata=api(
            "The code generation the job should run; it may only grow. `kubectl torchrun sync` "
            "increments it and uploads into the sync pod <job>-sync-<generation>; for git and s3 an "
            "increment fetches again. When it is synced, every worker restarts onto it together "
            "(hot reload): the Job, PVCs and Service stay.",
            schema={"minimum": 0, "format": "int64"},
            rules=(
                Rule(
                    "self >= oldSelf",
                    "workspace.generation may only grow: a generation is never synced twice",
                    reason="FieldValueInvalid",
                ),
            ),
        ),
    )


_SEED_SOURCES = ("upload", "zip", "none")


@cel(
    Rule(
        "!has(self.source) || self.source in " + str(list(_SEED_SOURCES)),
        "volumes.workspace (deprecated) takes source zip, upload or none; git, s3 and pvc need "
        "their settings: write spec.workspace instead",
        field_path=".source",
    ),
    Rule(
        "!has(self.enabled) || self.enabled || !has(self.source) || self.source == 'none'",
        "enabled: false means no workspace (the code is in the image), so source must be none or absent",
        field_path=".source",
    ),
)
@dataclass(frozen=True)
class SeedWorkspace:
    """Deprecated: the seed's `volumes.workspace`; read as `workspace` (see `as_workspace`)."""

    enabled: bool | None = field(
        default=None, metadata=api("false: no workspace, the code is in the image (source none).")
    )
    source: WorkspaceSource | None = field(
        default=None,
        metadata=api(
            "zip (the seed's name of upload), upload or none; upload when absent.",
            aliases={"zip": WorkspaceSource.UPLOAD.value},
        ),
    )

    def as_workspace(self) -> Workspace:
        """The `workspace` this seed form means."""
        if self.enabled is False:
            return Workspace(source=WorkspaceSource.NONE)
        return Workspace(source=self.source or WorkspaceSource.UPLOAD)


@dataclass(frozen=True)
class SeedVolumes:
    """Deprecated: the seed's `spec.volumes`, of which only `workspace` means anything here."""

    workspace: SeedWorkspace | None = field(
        default=None,
        metadata=api("Deprecated alias of spec.workspace: {enabled, source}; write spec.workspace."),
    )
