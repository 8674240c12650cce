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
kubectl's words (`Error from server (NotFound): ...`), as `Cluster.get` did. Retries are the
controller's client's, which follow client-go's, with kubectl's budget (10 retries): a 429 with
Retry-After — "storage is (re)initializing" right after a CRD is made — is waited out.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from controller.meta import Resource
from controller.rest import ApiError, RESTClient, load_config

DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
USER_AGENT = "kubectl/testbed-in-process"  # not a controller's: the audit-log filters tell them apart


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
        self.client = RESTClient(
            config, qps=1000, burst=1000, max_attempts=11, timeout=60, user_agent=USER_AGENT
        )
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
        try:
            if len(parsed.positional) == 2:
                return self.client.get(res, parsed.positional[1], namespace)
            got = self.client.list(res, namespace, label_selector=parsed.label, field_selector=parsed.field)
        except ApiError as e:
            said = f"Error from server ({e.reason or e.status}): {e.message}"
            raise AssertionError(f"kubectl get {' '.join(args)} failed: {said}") from e
        items = [{"kind": res.kind, "apiVersion": res.api_version, **item} for item in got.get("items") or ()]
        return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}

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
        with self._lock:
            if self._names is None or fresh:
                self._names = self._read_discovery()
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
