"""`kubectl get ... -o json` answered in this process, for `testbed.Cluster.get`.

A kubectl run costs 40–80 ms of CPU before it sends a byte (a 50 MB Go binary starting, its
discovery cache read), and the tests' polls made hundreds of them per module: on the 2 cores the
two test workers share, that CPU was taken from the control planes and the controllers under
test. This answers the same request with one HTTP GET over a kept-alive connection.

Only what it fully understands is answered here — one resource type (plural, singular, short
name or kind, optionally `resource.group`), at most one name, `-n`/`--namespace`, `-A`, `-l`/
`--selector`, `--field-selector`, `-o json` — resolved the way kubectl resolves it (the core group
first, then the API groups in discovery's order, each at its preferred version; aggregated
discovery, read again when a name is unknown, as after a CRD is installed). Everything else
answers None and the caller runs kubectl itself. Lists come back as kubectl prints them: a `List`
whose items carry their `kind` and `apiVersion`. A failed GET raises AssertionError with
kubectl's words (`Error from server (NotFound): ...`), as `Cluster.get` did. Retries are
kubectl's: only a 429 or 5xx with Retry-After ("storage is (re)initializing" right after a CRD is
made), at most 10; a refused connection fails at once, as an AssertionError. `KubeGet.kind` maps
a manifest's `apiVersion` and `kind` to its resource as kubectl does, for `testbed.Cluster.apply`.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from controller.meta import Resource
from controller.rest import ApiError, RESTClient, load_config

DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
USER_AGENT = "kubectl/testbed-in-process"
RETRIES = (
    10  # client-go's for a Retry-After answer  # not a controller's: the audit-log filters tell them apart
)


class Args:
    """`kubectl get`'s arguments, parsed; `ok` is False for anything this module does not answer."""

    def __init__(self, args: tuple[str, ...]) -> None:
        self.ok = True
        self.positional: list[str] = []
        self.namespace: str | None = None
        self.all_namespaces = False
        self.label: str | None = None
        self.field: str | None = None
        items = iter(args)
        for arg in items:
            flag, eq, value = arg.partition("=")
            if flag in ("-n", "--namespace", "-l", "--selector", "--field-selector", "-o", "--output"):
                value = value if eq else next(items, "")
                if flag in ("-n", "--namespace"):
                    self.namespace = value
                elif flag in ("-l", "--selector"):
                    self.label = value
                elif flag == "--field-selector":
                    self.field = value
                elif value != "json":
                    self.ok = False
            elif arg in ("-A", "--all-namespaces"):
                self.all_namespaces = True
            elif arg.startswith("-"):
                self.ok = False
            else:
                self.positional.append(arg)
        if len(self.positional) == 1 and "/" in self.positional[0]:
            self.positional = self.positional[0].split("/", 1)
        if not 1 <= len(self.positional) <= 2 or "," in self.positional[0] or not all(self.positional):
            self.ok = False


class KubeGet:
    """In-process `kubectl get -o json` against one cluster (module doc)."""

    def __init__(self, kubeconfig: Path) -> None:
        config = load_config(str(kubeconfig))
        self.client = RESTClient(config, qps=1000, burst=1000, timeout=60, user_agent=USER_AGENT)
        self.default_namespace = "default"  # the test bed's kubeconfigs name no namespace
        self._lock = threading.Lock()
        self._names: dict[str, list[Resource]] | None = None

    def __call__(self, args: tuple[str, ...]) -> dict[str, Any] | None:
        parsed = Args(args)
        if not parsed.ok:
            return None
        res = self.resource(parsed.positional[0])
        if res is None:
            return None  # kubectl says what the server lacks, in its own words
        namespace = None
        if res.namespaced and not parsed.all_namespaces:
            namespace = parsed.namespace or self.default_namespace
        name = parsed.positional[1] if len(parsed.positional) == 2 else None
        got = self._read(args, res, name, namespace, parsed)
        if name is not None:
            return got
        items = [{"kind": res.kind, "apiVersion": res.api_version, **item} for item in got.get("items") or ()]
        return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}

    def _read(
        self, args: tuple[str, ...], res: Resource, name: str | None, namespace: str | None, parsed: Args
    ) -> dict[str, Any]:
        """One GET, sent as kubectl's client sends it: again only when the server answers 429 or
        5xx with a Retry-After (at most RETRIES times, waiting what it asks), never after a
        connection error (the API server may be down on purpose). Any failure is an
        AssertionError in kubectl's words, which a `wait_until` reads as "not yet"."""
        for attempt in range(RETRIES + 1):
            try:
                if name is not None:
                    return self.client.get(res, name, namespace, attempts=1)
                return self.client.list(
                    res, namespace, label_selector=parsed.label, field_selector=parsed.field, attempts=1
                )
            except ApiError as e:
                if e.retry_after is not None and (e.status == 429 or e.status >= 500) and attempt < RETRIES:
                    time.sleep(min(e.retry_after, 30.0))
                    continue
                said = f"Error from server ({e.reason or e.status}): {e.message}"
                raise AssertionError(f"kubectl get {' '.join(args)} failed: {said}") from e
            except Exception as e:  # the connection: refused, reset, timed out
                raise AssertionError(f"kubectl get {' '.join(args)} failed: {e}") from e
        raise AssertionError("unreachable")

    def kind(self, api_version: str, kind: str) -> Resource | None:
        """The resource objects of `kind` in `api_version` are written to, as kubectl maps a
        manifest's object (discovery's plural and scope at the manifest's own version), or None
        when discovery has no such kind in that group."""
        group, _, version = api_version.rpartition("/")
        res = self.resource(f"{kind.lower()}.{group}" if group else kind.lower())
        if res is None or res.kind != kind or res.group != group:
            return None
        return Resource(res.group, version, res.plural, res.kind, res.namespaced)

    def resource(self, name: str) -> Resource | None:
        """The resource kubectl would pick for `name`, or None when discovery has none."""
        for fresh in (False, True):
            names = self._discovery(fresh)
            plain, _, group = name.lower().partition(".")
            found = [r for r in names.get(plain, ()) if not group or r.group == group]
            if found:
                return found[0]
        return None

    def _discovery(self, fresh: bool) -> dict[str, list[Resource]]:
        """The names discovery gives (read again when `fresh`); none when it cannot be read (the
        caller then leaves the request to kubectl, whose error says why)."""
        with self._lock:
            if self._names is None or fresh:
                try:
                    self._names = self._read_discovery()
                except Exception:
                    self._names = None
                    return {}
            return self._names

    def _read_discovery(self) -> dict[str, list[Resource]]:
        """Every name a resource answers to (plural, singular, short names, kind), each mapped to
        its resources in kubectl's order: the core group, then the groups as /apis lists them,
        the preferred (first) version of each."""
        names: dict[str, list[Resource]] = {}
        for path in ("/api", "/apis"):
            body = self.client.request("get", "GET", path, accept=DISCOVERY)
            for group in body.get("items") or ():
                versions = group.get("versions") or ()
                if not versions:
                    continue
                preferred = versions[0]
                for r in preferred.get("resources") or ():
                    kind = (r.get("responseKind") or {}).get("kind", "")
                    res = Resource(
                        group["metadata"].get("name", ""),
                        preferred["version"],
                        r["resource"],
                        kind,
                        r.get("scope") == "Namespaced",
                    )
                    aliases = {
                        r["resource"],
                        r.get("singularResource", ""),
                        kind.lower(),
                        *r.get("shortNames", ()),
                    }
                    for alias in aliases - {""}:
                        names.setdefault(alias, []).append(res)
        return names
