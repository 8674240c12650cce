"""Kubeconfig files read as kubectl reads them, and one context turned into a `ClusterConfig`.

Which files: an explicit path (it must exist), else every file of $KUBECONFIG (separated by
`os.pathsep`; missing ones skipped), else ~/.kube/config. Merging: for clusters, users and
contexts the first file defining a name wins, and so does the first `current-context` set.
Paths inside a file (certificate-authority, client-certificate, client-key, tokenFile, and an
exec command containing a `/`) are relative to that file's directory.

Supported credentials: client certificates, bearer token or tokenFile, basic auth, and exec
credential plugins (client.authentication.k8s.io/v1 and v1beta1), which cover EKS, GKE and AKS
today. The legacy `auth-provider` entries (gcp, oidc, azure) and impersonation (`as`) are
refused with one line naming the user entry; nothing is silently ignored.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controller.rest.config import ClusterConfig, ConfigError, ExecConfig

DEFAULT_KUBECONFIG = Path("~", ".kube", "config")
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))


@dataclass(frozen=True)
class Entry:
    """One named cluster, user or context, and the file that defined it."""

    body: Mapping[str, Any]
    source: Path


@dataclass
class Merged:
    files: list[Path]
    clusters: dict[str, Entry] = field(default_factory=dict)
    users: dict[str, Entry] = field(default_factory=dict)
    contexts: dict[str, Entry] = field(default_factory=dict)
    current_context: str | None = None

    def where(self) -> str:
        return "kubeconfig " + os.pathsep.join(str(f) for f in self.files)


def paths(explicit: str | None, environ: Mapping[str, str]) -> list[Path]:
    """The files kubectl would read, existing ones only; `ConfigError` when there is none."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"kubeconfig {explicit} does not exist")
        return [path]
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates = [Path(p).expanduser() for p in listed] or [DEFAULT_KUBECONFIG.expanduser()]
    found = [p for p in candidates if p.is_file()]
    if not found:
        where = f"KUBECONFIG={environ['KUBECONFIG']}" if listed else str(DEFAULT_KUBECONFIG)
        raise ConfigError(f"no kubeconfig: {where} has no file; set KUBECONFIG or pass --kubeconfig")
    return found


def read(files: list[Path]) -> Merged:
    """The files merged (module docstring)."""
    merged = Merged(files)
    for path in files:
        doc = _read_one(path)
        for section, key in SECTIONS:
            items = doc.get(section) or []
            if not isinstance(items, list):
                raise ConfigError(f"kubeconfig {path}: {section} must be a list")
            for i, item in enumerate(items):
                name = item.get("name") if isinstance(item, dict) else None
                body = item.get(key) if isinstance(item, dict) else None
                if not isinstance(name, str) or not name:
                    raise ConfigError(f"kubeconfig {path}: {section}[{i}] has no name")
                if not isinstance(body, dict):
                    raise ConfigError(f"kubeconfig {path}: {section}[{i}] ({name}) has no {key} mapping")
                getattr(merged, section).setdefault(name, Entry(body, path))
        current = doc.get("current-context")
        if merged.current_context is None and isinstance(current, str) and current:
            merged.current_context = current
    return merged


def load(files: list[Path], context: str | None = None) -> ClusterConfig:
    """The `ClusterConfig` of `context` (default: the current context) in the merged files."""
    merged = read(files)
    name = context or merged.current_context
    if not name:
        raise ConfigError(f"{merged.where()}: no current-context is set and no context was given")
    ctx = merged.contexts.get(name)
    if ctx is None:
        raise ConfigError(f"{merged.where()}: context {name!r} not found")
    cluster_name, user_name = ctx.body.get("cluster"), ctx.body.get("user")
    cluster = merged.clusters.get(cluster_name) if isinstance(cluster_name, str) else None
    if cluster is None:
        raise ConfigError(f"{merged.where()}: context {name!r}: cluster {cluster_name!r} not found")
    user = Entry({}, ctx.source)
    if user_name:
        found = merged.users.get(user_name) if isinstance(user_name, str) else None
        if found is None:
            raise ConfigError(f"{merged.where()}: context {name!r}: user {user_name!r} not found")
        user = found
    return _config(Fields.of(cluster, f"cluster {cluster_name!r}"), Fields.of(user, f"user {user_name!r}"))


def context_namespace(files: list[Path]) -> str | None:
    """The current context's namespace, if it sets one."""
    merged = read(files)
    ctx = merged.contexts.get(merged.current_context or "")
    ns = ctx.body.get("namespace") if ctx else None
    return ns if isinstance(ns, str) and ns else None


def _read_one(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"kubeconfig {path}: cannot read it: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"kubeconfig {path}: not valid YAML{line}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"kubeconfig {path}: not UTF-8 text") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {path}: not a mapping")
    return doc


class Fields:
    """Typed access to one entry's fields; every error names the file, the entry and the field."""

    def __init__(self, body: Mapping[str, Any], base: Path, where: str) -> None:
        self.body = body
        self.base = base  # relative paths are relative to the file's directory
        self.where = where

    @classmethod
    def of(cls, entry: Entry, name: str) -> Fields:
        return cls(entry.body, entry.source.parent, f"kubeconfig {entry.source}: {name}")

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.where}: {key} {problem}")

    def text(self, key: str) -> str | None:
        value = self.body.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self.error(key, "must be a string")
        return value

    def path(self, key: str) -> str | None:
        value = self.text(key)
        return None if value is None else str(self.base / Path(value).expanduser())

    def data(self, key: str) -> bytes | None:
        value = self.text(key)
        if value is None:
            return None
        try:
            return base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError):
            raise self.error(key, "is not valid base64") from None

    def flag(self, key: str) -> bool:
        value = self.body.get(key, False)
        if not isinstance(value, bool):
            raise self.error(key, "must be true or false")
        return value


def _config(cluster: Fields, user: Fields) -> ClusterConfig:
    server = cluster.text("server")
    if server is None:
        raise cluster.error("server", "is not set")
    if "://" not in server:
        server = "https://" + server  # as client-go defaults it
    ca_file, ca_data = cluster.path("certificate-authority"), cluster.data("certificate-authority-data")
    insecure = cluster.flag("insecure-skip-tls-verify")
    if insecure and (ca_file or ca_data):
        raise cluster.error(
            "insecure-skip-tls-verify", "cannot be true with a certificate-authority (as kubectl)"
        )
    proxy = cluster.text("proxy-url")
    if proxy and not proxy.startswith(("http://", "https://")):
        raise cluster.error("proxy-url", "must be an http:// or https:// URL (no socks proxies)")
    _refuse_unsupported(user)
    cert_file, cert_data = user.path("client-certificate"), user.data("client-certificate-data")
    key_file, key_data = user.path("client-key"), user.data("client-key-data")
    if bool(cert_file or cert_data) != bool(key_file or key_data):
        raise user.error("client-key" if cert_file or cert_data else "client-certificate", "is missing")
    token_file = user.path("tokenFile")
    if token_file and not os.access(token_file, os.R_OK):
        raise user.error("tokenFile", f"cannot be read: {token_file}")
    return ClusterConfig(
        host=server.rstrip("/"),
        ca_file=ca_file,
        ca_data=ca_data,
        cert_file=cert_file,
        cert_data=cert_data,
        key_file=key_file,
        key_data=key_data,
        token=user.text("token"),
        token_file=token_file,
        username=user.text("username"),
        password=user.text("password"),
        insecure_skip_tls_verify=insecure,
        tls_server_name=cluster.text("tls-server-name"),
        proxy_url=proxy,
        exec=_exec(user, cluster, server),
    )


def _refuse_unsupported(user: Fields) -> None:
    provider = user.body.get("auth-provider")
    if provider:
        kind = provider.get("name", "?") if isinstance(provider, dict) else "?"
        raise user.error(
            "auth-provider",
            f"({kind}) is not supported: the legacy auth providers were removed from client-go; use an "
            "exec credential plugin instead (gke-gcloud-auth-plugin, kubelogin, aws eks get-token)",
        )
    for key in ("as", "as-uid", "as-groups", "as-user-extra"):
        if user.body.get(key):
            raise user.error(key, "(impersonation) is not supported")


def _exec(user: Fields, cluster: Fields, server: str) -> ExecConfig | None:
    spec = user.body.get("exec")
    if not spec:
        return None
    if not isinstance(spec, dict):
        raise user.error("exec", "must be a mapping")
    plugin = Fields(spec, user.base, f"{user.where}: exec")
    command = plugin.text("command")
    if command is None:
        raise plugin.error("command", "is not set")
    if "/" in command:  # a path, not a name looked up in PATH
        command = str(user.base / Path(command).expanduser())
    api_version = plugin.text("apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise plugin.error(
            "apiVersion", f"must be one of {', '.join(EXEC_API_VERSIONS)}, not {api_version!r}"
        )
    args = spec.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise plugin.error("args", "must be a list of strings")
    env = spec.get("env") or []
    pairs = (
        [(e.get("name"), e.get("value")) for e in env if isinstance(e, dict)] if isinstance(env, list) else []
    )
    if len(pairs) != len(env) or not all(isinstance(n, str) and isinstance(v, str) for n, v in pairs):
        raise plugin.error("env", "must be a list of {name, value} strings")
    info = None
    if spec.get("provideClusterInfo"):
        ca = cluster.data("certificate-authority-data")
        ca_file = cluster.path("certificate-authority")
        if ca is None and ca_file:
            ca = Path(ca_file).read_bytes() if os.path.isfile(ca_file) else None
        info = json.dumps(
            {
                "server": server,
                "tls-server-name": cluster.text("tls-server-name") or "",
                "insecure-skip-tls-verify": cluster.flag("insecure-skip-tls-verify"),
                "certificate-authority-data": base64.b64encode(ca).decode() if ca else "",
                "proxy-url": cluster.text("proxy-url") or "",
            }
        )
    return ExecConfig(
        command=command,
        args=tuple(args),
        env=tuple((str(n), str(v)) for n, v in pairs),
        api_version=str(api_version),
        user=user.where,
        install_hint=plugin.text("installHint") or "",
        cluster_info=info,
    )
