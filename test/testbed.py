"""Test helpers: the local control plane (hack/controlplane.sh) and waiting without bare sleeps.

`Cluster` is what the session-scoped `cluster` fixture yields: the admin kubeconfig of a control
plane started for this test session, the Go-built kubectl, and a way to stop/start single
components (for tests that kill kube-apiserver or etcd on purpose). The requests every test makes
(its namespace, the objects it applies, its `get`, `logs` and existence polls) go from this process
over test/kubeget.py's kept-alive client, as kubectl would send them; anything else runs kubectl.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from kubeget import KubeGet

from controller.meta import Resource
from controller.rest import ApiError
from controller.rest.request import Request
from controller.rest.resources import NAMESPACES, PODS

REPO = Path(__file__).resolve().parent.parent
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


def manifest_text(manifest: dict[str, Any] | list[dict[str, Any]]) -> str:
    """Objects as kubectl reads them back unchanged: one JSON document each, `---` between. (PyYAML
    writes a string such as `7179e0` unquoted, as YAML 1.1 reads it, and kubectl's YAML 1.2 parser
    then reads a number: a random hex label value failed a test that way.)"""
    return "\n---\n".join(json.dumps(doc) for doc in (manifest if isinstance(manifest, list) else [manifest]))


CONTROLPLANE = REPO / "hack" / "controlplane.sh"
CHART = REPO / "charts" / "torchrun-controller"  # the Helm chart (test_helm_chart.py)
# The control plane's node agent and its sync pods run `controller` on this Python: the one these
# tests import it with (hack/controlplane.sh reads TORCHRUN_PYTHON; an explicit value wins).
os.environ.setdefault("TORCHRUN_PYTHON", sys.executable)

T = TypeVar("T")
# what the node agent (hack/testbed/nodeagent) logs for each pod or claim it acts on: `pod=<ns>/<name>`
# ("prepared", "started", "reported", "worker logs") or `claim=<ns>/<name>` ("provisioned")
NODE_AGENT_SUBJECT = re.compile(r"\b(?:pod|claim)=(?P<namespace>[^/\s]+)/(?P<name>\S+)")


_KUBEGET: dict[tuple[Path, int], KubeGet] = {}
_KUBEGET_LOCK = threading.Lock()


def _in_process(kubeconfig: Path) -> KubeGet:
    """The in-process `kubectl get` of a kubeconfig as it is now (a control plane brought down and
    up again writes a new one)."""
    key = (kubeconfig, kubeconfig.stat().st_mtime_ns)
    with _KUBEGET_LOCK:
        if key not in _KUBEGET:
            _KUBEGET[key] = KubeGet(kubeconfig)
        return _KUBEGET[key]


# TORCHRUN_TEST_REAL_NODES=2 runs the real-node tests on two real nodes beside each other
# (realnode-0, realnode-1); hack/test.sh sets it with three workers or more, its default. Unset,
# every one runs on realnode-0.
TWO_REAL_NODES = os.environ.get("TORCHRUN_TEST_REAL_NODES", "1") == "2"


def real_node_index(item: Any) -> int:
    """The real node a real-node test runs on: with two real nodes (TWO_REAL_NODES), N of its
    `@pytest.mark.real_node(N)`, else 0; always 0 with one (a pytest item; test/conftest.py groups
    the tests of each node on one worker)."""
    mark = item.get_closest_marker("real_node")
    return int(mark.args[0]) if mark is not None and TWO_REAL_NODES else 0


def cache_dir() -> Path:
    """Where hack/ caches what it builds (TORCHRUN_CACHE_DIR, as hack/testbed/lib.sh reads it)."""
    base = os.environ.get("TORCHRUN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torchrun-controller"
    )
    return Path(base)


def pins() -> dict[str, str]:
    """hack/versions.env: every pinned version by its name."""
    return dict(
        line.split("=", 1)
        for line in (CONTROLPLANE.parent / "versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )


def kubectl_binary() -> Path:
    """The kubectl built with the control plane, at the pinned version."""
    return cache_dir() / "bin" / f"kube-{pins()['KUBE_VERSION']}" / "kubectl"


def helm_binary() -> Path:
    """The helm of hack/testbed/build-helm.sh, at the pinned version; a test that needs it fails
    (it is built by hack/test.sh) when it is not there."""
    path = cache_dir() / "bin" / f"helm-{pins()['HELM_VERSION']}" / "helm"
    if not path.exists():
        raise AssertionError(
            f"{path} is missing: hack/testbed/build-helm.sh builds it (hack/test.sh runs it)"
        )
    return path


@contextmanager
def controller_program(
    kubeconfig: Path, namespace: str, log: Path, *flags: str
) -> Iterator[subprocess.Popen[bytes]]:
    """The `torchrun-controller` program (this checkout's) for `namespace`, its output in `log`;
    stopped on exit (SIGTERM, SIGKILL after 30 s). While it runs, a failing test's report ends
    with the tail of `log` (`live_logs`)."""
    command = [sys.executable, "-m", "controller.cmd.main", "--kubeconfig", str(kubeconfig)]
    command += ["--namespace", namespace, "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"]
    with open(log, "wb") as out, shown_on_failure(log):
        proc = subprocess.Popen(
            [*command, "--log-format", "console", *flags], stdout=out, stderr=subprocess.STDOUT, cwd=REPO
        )
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


_LIVE_LOGS: list[Path] = []


@contextmanager
def shown_on_failure(log: Path) -> Iterator[None]:
    """While inside, `log` is one of `live_logs()`: a test that fails meanwhile shows its tail."""
    _LIVE_LOGS.append(log)
    try:
        yield
    finally:
        _LIVE_LOGS.remove(log)


def live_logs() -> list[Path]:
    """The logs of the programs running now (test/conftest.py adds their tails to a failure's
    report: a controller replica's log is deleted with its temporary directory)."""
    return list(_LIVE_LOGS)


def _unverified() -> ssl.SSLContext:
    """The client context for the test bed's self-signed endpoints (the progress endpoint): encrypts,
    verifies nothing; made once (`ssl.create_default_context()` loads the CA bundle, ~20 ms of CPU
    each)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


UNVERIFIED = _unverified()


def wait_until(
    fn: Callable[[], T | None],
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "condition",
) -> T:
    """Poll `fn` until it returns a truthy value, and return that value; fail after `timeout`.

    The one wait of every test, unit or not. It polls again after 1 ms, then twice as long each
    time up to `interval`: what a unit test waits for (a thread's next step) is there within
    milliseconds, what waits on the control plane settles into polls `interval` apart. An assert
    inside `fn` means "not yet" (the last one is chained to the timeout's error)."""
    deadline = time.monotonic() + timeout
    pause = min(0.001, interval)
    last_exc: BaseException | None = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except AssertionError as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}") from last_exc
        time.sleep(pause)
        pause = min(pause * 2, interval)


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    """The condition of type `ctype` in `obj`'s status (a Kubernetes object as JSON), or None."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return None


def _logs_query(args: tuple[str, ...]) -> tuple[str, str, dict[str, str]] | None:
    """`kubectl logs` arguments as (namespace, pod, query of the pod's `log` subresource), or None
    for any argument `Cluster.logs` leaves to kubectl (no `-n` or `-c`, a flag it does not know)."""
    namespace = container = None
    positional: list[str] = []
    params: dict[str, str] = {}
    items = iter(args)
    for arg in items:
        if arg in ("-n", "--namespace"):
            namespace = next(items, None)
        elif arg in ("-c", "--container"):
            container = next(items, None)
        elif arg == "--timestamps":
            params["timestamps"] = "true"
        elif arg in ("-p", "--previous"):
            params["previous"] = "true"
        elif arg.startswith("--tail=") and arg[len("--tail=") :].isdigit():
            params["tailLines"] = arg[len("--tail=") :]
        elif arg.startswith("-"):
            return None
        else:
            positional.append(arg)
    if not namespace or not container or len(positional) != 1:
        return None
    return namespace, positional[0], {"container": container, **params}


@dataclass
class Cluster:
    run_dir: Path
    kubeconfig: Path
    kubectl_path: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "TORCHRUN_RUN_DIR": str(self.run_dir), "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def logs(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`kubectl logs ARGS`, answered in this process for `-n NS POD -c CONTAINER` with any of
        `--timestamps`, `--previous`, `--tail=N` (the real node's tests poll their pods' logs twice a
        second: a kubectl each time was the largest CPU cost of their chain), else by kubectl. The
        result is kubectl's: the log on stdout, a failure's words on stderr and exit status 1
        (an AssertionError when `check`)."""
        query = _logs_query(args)
        if query is None:
            return self.kubectl("logs", *args, check=check)
        namespace, pod, params = query
        request = Request("get", "GET", PODS.path(namespace, pod, "log"), "pods/log", params, accept="*/*")
        command = ["kubectl", "logs", *args]
        try:
            answer = self.api().client.send(request, stream=False, read_timeout=60)
            proc = subprocess.CompletedProcess(command, 0, answer.data.decode(errors="replace"), "")
        except ApiError as e:
            said = f"Error from server ({e.reason or e.status}): {e.message}"
            proc = subprocess.CompletedProcess(command, 1, "", said)
        except Exception as e:  # the connection: refused, reset, timed out
            proc = subprocess.CompletedProcess(command, 1, "", f"error: {e}")
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl logs {' '.join(args)} failed: {proc.stderr}")
        return proc

    def get(self, *args: str) -> dict[str, Any]:
        """`kubectl get ... -o json`, parsed: answered in this process where test/kubeget.py
        understands the arguments (most polls), else by kubectl."""
        answered = _in_process(self.kubeconfig)(args)
        if answered is not None:
            return answered
        out: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return out

    def api(self) -> KubeGet:
        """This cluster's in-process client (test/kubeget.py), for the kubeconfig as it is now."""
        return _in_process(self.kubeconfig)

    def found(self, *args: str) -> bool:
        """Whether `kubectl get ARGS` succeeds (what it names exists): a poll for an object to come or
        go, answered in this process where `get` can; any failure is "not found", as kubectl's exit
        status was."""
        try:
            self.get(*args)
        except AssertionError:
            return False
        return True

    def apply(
        self, manifest: dict[str, Any] | list[dict[str, Any]] | str, namespace: str | None = None
    ) -> str:
        """`kubectl apply --server-side --force-conflicts [-n namespace] -f -` of `manifest`.
        Objects given as values are applied in this process when discovery knows each one's kind
        (`apply_in_process`); text, such as a file a user would apply, always goes to kubectl."""
        if not isinstance(manifest, str):
            said = self.apply_in_process(manifest if isinstance(manifest, list) else [manifest], namespace)
            if said is not None:
                return said
        text = manifest if isinstance(manifest, str) else manifest_text(manifest)
        ns = ["-n", namespace] if namespace else []
        return self.kubectl("apply", "--server-side", "--force-conflicts", *ns, "-f", "-", input=text).stdout

    def apply_in_process(self, objects: list[dict[str, Any]], namespace: str | None) -> str | None:
        """The request kubectl's server-side apply sends for each object, in order, sent from this
        process (no 40-80 ms of CPU for a kubectl to start): an apply patch with kubectl's field
        manager, `force` (`--force-conflicts`) and kubectl's strict field validation, into the
        object's namespace, else `namespace`, else `default`. Returns kubectl's lines, or None,
        having sent nothing, when an object's kind is not in discovery or its namespace contradicts
        `namespace` (kubectl then says why in its own words). A refused object raises
        AssertionError with the API server's message, as a failed kubectl did."""
        api = self.api()
        planned: list[tuple[Resource, dict[str, Any], str | None]] = []
        for obj in objects:
            res = api.kind(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
            meta = obj.get("metadata") or {}
            if res is None or not meta.get("name"):
                return None
            own = meta.get("namespace")
            if own and namespace and own != namespace:
                return None
            ns = (own or namespace or api.default_namespace) if res.namespaced else None
            body = {**obj, "metadata": {**meta, "namespace": ns}} if ns else obj
            planned.append((res, body, ns))
        said = []
        for res, body, ns in planned:
            name = body["metadata"]["name"]
            params = {"fieldManager": "kubectl", "force": "true", "fieldValidation": "Strict"}
            try:
                api.client.request(
                    "patch",
                    "PATCH",
                    res.path(ns, name),
                    res.key,
                    params=params,
                    body=body,
                    content_type="application/apply-patch+yaml",
                )
            except ApiError as e:
                raise AssertionError(f"kubectl apply of {res.key}/{name} failed: {e.message}") from e
            said.append(f"{res.key}/{name} serverside-applied\n")
        return "".join(said)

    def wait_established(self, *names: str, timeout: float = 60) -> None:
        """Return once every CRD named (`crd/<name>` or `<name>`; none: every CRD) has
        `Established=True`. Not `kubectl wait --for=condition=Established`: for a CRD created a
        moment ago, whose status has no conditions yet, kubectl fails at once with
        `.status.conditions accessor error: <nil>` instead of waiting (seen in a test run)."""
        refs = [n if n.startswith("crd/") else f"crd/{n}" for n in names] or ["crd"]

        def established() -> bool:
            listed = self.get(*refs)
            items = listed["items"] if listed.get("kind") == "List" else [listed]
            return all((condition(crd, "Established") or {}).get("status") == "True" for crd in items)

        wait_until(established, timeout=timeout, interval=0.2, message=f"{' '.join(refs)} to be Established")

    def create_namespace(self, name: str, timeout: float = 60) -> None:
        """Create namespace `name` and return once its `default` ServiceAccount exists, as a user's
        first pod needs: until kube-controller-manager's serviceaccount controller makes it, the
        ServiceAccount admission plugin refuses every pod (`error looking up service account
        <ns>/default`; seen in CI with the controller manager busy)."""
        client = self.api().client
        try:
            client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        except ApiError as e:
            raise AssertionError(f"kubectl create namespace {name} failed: {e.message}") from e

        def default_account() -> bool:
            try:
                return bool(client.get(SERVICE_ACCOUNTS, "default", name, attempts=1))
            except ApiError as e:
                if e.status == 404:
                    return False
                raise AssertionError(f"serviceaccount default -n {name}: {e.message}") from e

        wait_until(default_account, timeout, interval=0.2, message=f"serviceaccount default in {name}")

    def delete_namespace(self, name: str, timeout: float = 110) -> None:
        """Delete namespace `name` and return once none of its pods holds a node; everything else in
        it is removed in the background. Pods still on a node after `timeout` seconds fail the
        caller, named with their nodes and phases: a leak would otherwise surface later as another
        test's capacity failure, far from its cause.

        Pods bound to nodes are what holds the nodes' GPUs (CPUs, memory, pod slots): once they are
        gone, another test can have the nodes. The DELETE makes the namespace Terminating at once and
        from then on the API server admits nothing new into it (NamespaceLifecycle), so no
        controller can start another pod there. Its pods are deleted here in one request and
        waited for (under a second on kwok nodes, even for a hundred); a pod being deleted that
        has no node (unschedulable, or for a scheduler that does not run; a Job's finalizer keeps
        it until the pod garbage collector's next pass, up to 20 s) is not waited for: the API
        server never binds a pod being deleted. Waiting for the whole namespace would cost 5-30 s
        more per test: kube-controller-manager's namespace controller starts emptying a namespace
        only 5 s after its deletion, and waits out the pods' grace-period estimate before it
        looks again."""
        client = self.api().client
        with suppress(Exception):  # gone already, or the API server down on purpose: the pods say
            client.delete(NAMESPACES, name, attempts=1)
        deadline = time.monotonic() + timeout
        left: list[str] | str = "no answer to listing its pods"
        while True:
            try:
                pods = client.list(PODS, name, attempts=1)["items"]
            except Exception as e:
                left = f"listing its pods: {e}"
            else:
                if any(not p["metadata"].get("deletionTimestamp") for p in pods):
                    # DeleteCollection: one request for all of them (kubectl delete --all sends
                    # one per pod and waits for each, ~0.2 s a pod)
                    with suppress(Exception):
                        client.request("deletecollection", "DELETE", PODS.path(name), PODS.key, attempts=1)
                elif not any(p["spec"].get("nodeName") for p in pods):
                    return
                left = [
                    f"{p['metadata']['name']} on {p['spec'].get('nodeName') or 'no node'}"
                    f" ({(p.get('status') or {}).get('phase', '?')}"
                    f"{', being deleted' if p['metadata'].get('deletionTimestamp') else ''})"
                    for p in pods
                ]
            if time.monotonic() >= deadline:
                raise AssertionError(f"namespace {name}: pods still hold nodes after {timeout}s: {left}")
            time.sleep(0.2)

    @property
    def node_agent_log(self) -> Path:
        return self.run_dir / "logs" / "node-agent.log"

    def node_agent_log_size(self) -> int:
        return self.node_agent_log.stat().st_size if self.node_agent_log.exists() else 0

    def served_by_node_agent(self, namespace: str, since: int = 0) -> list[str]:
        """The pods and claims of `namespace` the test bed's node agent acted on (a sync pod run, a
        worker's logs written, a volume provisioned), from its log after byte `since` (from the
        start when the log is shorter than that: it was replaced)."""
        if not self.node_agent_log.exists():
            return []
        with self.node_agent_log.open("rb") as log:
            log.seek(since if since <= self.node_agent_log.stat().st_size else 0)
            text = log.read().decode("utf-8", "replace")
        found = (m for m in NODE_AGENT_SUBJECT.finditer(text) if m.group("namespace") == namespace)
        return list(dict.fromkeys(m.group("name") for m in found))

    def controlplane(self, *args: str) -> None:
        started = time.time()
        subprocess.run(
            [str(CONTROLPLANE), *args], env=self.env(), check=True, capture_output=True, timeout=300
        )
        if args[:1] == ("up",) or args[:2] == ("start", "kwok"):
            self.wait_for_kwok(started)

    def wait_for_kwok(self, since: float, timeout: float = 120) -> None:
        """Return once a kwok started after `since` manages every fake node again.

        kwok moves a node's pods (starts, ends, deletes them) only while it holds the node's Lease.
        One started again (`up` after `down`, `start kwok`) finds its predecessor's Leases still
        there and takes them over about 30 s later; `up` only waits for the nodes to be Ready, which
        they still are. Until then a pod bound to a fake node stays as it is, so a test that ran
        next would wait that long for its pods. A Lease renewed after `since` is the new kwok's."""

        def renewed() -> bool:
            nodes = self.get("nodes")["items"]
            fake = {
                n["metadata"]["name"]
                for n in nodes
                if (n["metadata"].get("annotations") or {}).get("kwok.x-k8s.io/node") == "fake"
            }
            leases = {
                item["metadata"]["name"]: (item.get("spec") or {}).get("renewTime")
                for item in self.get("leases", "-n", "kube-node-lease")["items"]
            }
            return all(
                leases.get(name)
                and datetime.fromisoformat(leases[name].replace("Z", "+00:00")).timestamp() > since
                for name in fake
            )

        wait_until(renewed, timeout, 0.5, message="kwok to hold every fake node's Lease again")

    def stop(self, component: str) -> None:
        self.controlplane("stop", component)

    def start(self, component: str) -> None:
        self.controlplane("start", component)

    def ports(self) -> dict[str, int]:
        text = (self.run_dir / "ports.env").read_text()
        return {k: int(v) for k, v in (line.split("=", 1) for line in text.split()) if v.isdigit()}

    def etcd(self, call: str, body: dict[str, Any]) -> dict[str, Any]:
        """One call to etcd's JSON gateway, e.g. `etcd("kv/compaction", {"revision": 5})`."""
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.ports()['ETCD_PORT']}/v3/{call}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            out: dict[str, Any] = json.loads(resp.read())
            return out
