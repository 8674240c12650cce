"""A container's environment and command line as a kubelet builds them, then mapped to the host.

Order as in the kubelet (kubelet_pods.go `makeEnvironmentVariables`): `envFrom` sources first
(each key with the source's `prefix`), then `env` entries in order, later ones winning; a `value`
may reference earlier variables as `$(NAME)` (`$$` escapes), and `command`/`args` are expanded
the same way. `valueFrom` supports secretKeyRef, configMapKeyRef and the usual fieldRefs.

Then the host mapping: every value and argument that is a path equal to or under a mountPath is
rewritten to the directory standing for it (`PathMap.rewrite`), and the paths of the workspace
contract (docs/workspace.md) are set explicitly when a mount covers their default, so the sync
program finds its directories whether or not the pod spells the variables out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nodeagent.podvolumes import Lookup, NotReadyError, PathMap

Obj = Mapping[str, Any]

# The sync program's path variables and their in-container defaults (docs/workspace.md).
CONTRACT_PATHS = {
    "TORCHRUN_WORKSPACE": "/workspace",
    "TORCHRUN_SOURCE_DIR": "/source",
    "TORCHRUN_SOURCE_SECRET_DIR": "/var/run/secrets/torchrun.ai/source",
}
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined names are replaced, others kept, `$$` is `$`."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REF.sub(sub, value)


def _field(pod: Obj, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise NotReadyError(f"fieldRef {path!r} is not supported by the test bed")


def _value_from(pod: Obj, src: Obj, lookup: Lookup) -> str | None:
    ns = pod["metadata"]["namespace"]
    for kind, fetch in (("secretKeyRef", lookup.secret), ("configMapKeyRef", lookup.configmap)):
        if kind in src:
            ref = src[kind]
            data = fetch(ns, ref["name"], bool(ref.get("optional")))
            if ref["key"] not in data:
                if ref.get("optional"):
                    return None
                raise NotReadyError(f"{kind} {ref['name']}/{ref['key']} is missing")
            return data[ref["key"]].decode()
    if "fieldRef" in src:
        return _field(pod, src["fieldRef"]["fieldPath"])
    return ""  # resourceFieldRef: no limits to report here


def container_env(pod: Obj, container: Obj, lookup: Lookup) -> dict[str, str]:
    """The environment the container's spec asks for, before any host mapping."""
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for src in container.get("envFrom") or ():
        prefix = src.get("prefix", "")
        if "secretRef" in src:
            data = lookup.secret(ns, src["secretRef"]["name"], bool(src["secretRef"].get("optional")))
        else:
            data = lookup.configmap(
                ns, src["configMapRef"]["name"], bool(src["configMapRef"].get("optional"))
            )
        env.update({prefix + k: v.decode() for k, v in data.items()})
    for item in container.get("env") or ():
        if "valueFrom" in item:
            value = _value_from(pod, item["valueFrom"], lookup)
            if value is None:
                continue
        else:
            value = expand(item.get("value", ""), env)
        env[item["name"]] = value
    return env


def host_env(env: Mapping[str, str], paths: PathMap) -> dict[str, str]:
    """`env` with container paths rewritten to the host, plus the contract's path variables."""
    out = {k: paths.rewrite(v) for k, v in env.items()}
    for name, default in CONTRACT_PATHS.items():
        host = paths.host(default)
        if name not in out and host is not None:
            out[name] = str(host)
    return out


def host_argv(container: Obj, env: Mapping[str, str], paths: PathMap) -> list[str]:
    """`command` + `args`, expanded with the container's (unmapped) environment, paths mapped."""
    argv = [expand(a, env) for a in (*(container.get("command") or ()), *(container.get("args") or ()))]
    return [paths.rewrite(a) for a in argv]
