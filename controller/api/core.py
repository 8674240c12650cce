"""Fragments of core/v1 and meta/v1 both kinds embed: env vars, tolerations, references, metadata.

They are typed (rather than opaque) where users commonly get them wrong, so the API server
rejects the mistake at admission with the field's path; deeper core/v1 objects (`valueFrom`,
affinity) stay opaque `JSONObject`s and are validated by the API server when the controller
creates the pods.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.api.fields import JSONObject, Rule, api, cel

# Bounds that keep the CEL cost estimate of rules over these lists small.
MAX_ENV = 128
MAX_TOLERATIONS = 32
MAX_NAME_LENGTH = 253
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Schema keywords shared by many fields.
NAME_SCHEMA = {"minLength": 1, "maxLength": MAX_NAME_LENGTH, "pattern": DNS_SUBDOMAIN_PATTERN}
LABEL_NAME_SCHEMA = {"minLength": 1, "maxLength": 63, "pattern": DNS_LABEL_PATTERN}
# a label key: an optional DNS subdomain prefix and `/`, then a name of at most 63 characters
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_KEY_SCHEMA = {"minLength": 1, "maxLength": 317, "pattern": LABEL_KEY_PATTERN}
PATH_SCHEMA = {"pattern": "^/", "maxLength": 1024}
IMAGE_SCHEMA = {"minLength": 1, "maxLength": 1024}


@cel(
    Rule(
        "!(has(self.value) && has(self.valueFrom))",
        "value and valueFrom are mutually exclusive",
        reason="FieldValueForbidden",
    )
)
@dataclass(frozen=True)
class EnvVar:
    """An environment variable of the torchrun container (core/v1 EnvVar)."""

    name: str = field(
        metadata=api(
            "Name of the variable.", schema={"minLength": 1, "maxLength": 256, "pattern": r"^[^=]+$"}
        )
    )
    value: str | None = field(default=None, metadata=api("Literal value.", schema={"maxLength": 32768}))
    value_from: JSONObject | None = field(
        default=None,
        metadata=api(
            "Source of the value (core/v1 EnvVarSource: secretKeyRef, configMapKeyRef, fieldRef, ...)."
        ),
    )


ENV_LIST_SCHEMA = {
    "maxItems": MAX_ENV,
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
}


@cel(
    Rule(
        "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
        "value must be empty when operator is Exists",
        field_path=".value",
        reason="FieldValueForbidden",
    ),
    Rule(
        "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        "tolerationSeconds is only allowed with effect NoExecute",
        field_path=".tolerationSeconds",
        reason="FieldValueForbidden",
    ),
)
@dataclass(frozen=True)
class Toleration:
    """A toleration added to every pod of the job (core/v1 Toleration)."""

    key: str | None = field(
        default=None,
        metadata=api(
            "Taint key to tolerate; empty with operator Exists tolerates every taint.",
            schema={"maxLength": 316},
        ),
    )
    operator: str | None = field(
        default=None, metadata=api("Exists or Equal (the default).", schema={"enum": ["Exists", "Equal"]})
    )
    value: str | None = field(
        default=None, metadata=api("Taint value to match with Equal.", schema={"maxLength": 63})
    )
    effect: str | None = field(
        default=None,
        metadata=api(
            "Taint effect to tolerate; empty tolerates every effect.",
            schema={"enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]},
        ),
    )
    toleration_seconds: int | None = field(
        default=None,
        metadata=api("How long a NoExecute taint is tolerated before eviction.", schema={"format": "int64"}),
    )


TOLERATION_LIST_SCHEMA = {"maxItems": MAX_TOLERATIONS, "x-kubernetes-list-type": "atomic"}


@dataclass(frozen=True)
class LocalObjectReference:
    """A reference to an object in the same namespace, by name."""

    name: str = field(metadata=api("Name of the object.", schema=NAME_SCHEMA))


class Overridable(str, enum.Enum):
    """The job fields a queue may let jobs override (`spec.allowOverrides`).

    Each names a field of `TorchrunJob.spec.overrides`. The node shape (GPUs, CPUs, memory,
    storage) is deliberately not overridable: it is what the queue is, what its scheduler quota
    counts, and what `numGPUs` is resolved against.
    """

    IMAGE = "image"
    WORKING_DIR = "workingDir"
    ENV = "env"
    PRIORITY_CLASS_NAME = "priorityClassName"
    NODE_SELECTOR = "nodeSelector"
    TOLERATIONS = "tolerations"
    CHECKPOINTS_KEEP = "checkpointsKeep"


@dataclass(frozen=True)
class ObjectMeta:
    """The parts of metav1.ObjectMeta the controllers read (parsed, never part of our schema)."""

    name: str = field(default="", metadata=api("Name."))
    namespace: str = field(default="", metadata=api("Namespace; empty for cluster-scoped objects."))
    uid: str = field(default="", metadata=api("UID."))
    resource_version: str = field(default="", metadata=api("Resource version."))
    generation: int = field(default=0, metadata=api("Generation of the spec."))
    creation_timestamp: datetime.datetime | None = field(default=None, metadata=api("Creation time."))
    deletion_timestamp: datetime.datetime | None = field(default=None, metadata=api("Deletion time."))
    labels: Mapping[str, str] = field(default_factory=dict, metadata=api("Labels."))
    annotations: Mapping[str, str] = field(default_factory=dict, metadata=api("Annotations."))
