"""Progress reports as the reporter sidecar sends them, for tests against a real controller: a
controller replica with leader election and its progress endpoint on a free port, a pod-bound
token minted by the API server (TokenRequest), the POST itself, a report body, and the running
worker pod of a job's node."""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from testbed import UNVERIFIED, Cluster, controller_program, wait_until

from controller.rest import RESTClient

AUDIENCE = "torchrun-controller"


class HasRest(Protocol):
    """A test bed: its namespace and a REST client of the test's own."""

    @property
    def namespace(self) -> str: ...

    @property
    def rest(self) -> RESTClient: ...


_IDENTITIES: dict[str, str] = {}  # replica identity → the namespace it was first used in (`replica`)


class Replica(NamedTuple):
    identity: str
    url: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def replica(
    cluster: Cluster, ns: str, logs: Path, identity: str, period: float, *more: str, url: bool = False
) -> Iterator[Replica]:
    """One controller process with leader election and the progress endpoint on a free port
    (`more`: further flags; `url`: the pods are told that endpoint, `--progress-url`, which a job
    that restarts in place needs). An identity names one namespace's replica for the whole session:
    the audit log is shared by every module a worker runs, and a check of what one replica wrote
    (its user agent ends with its identity) must not count another module's."""
    claimed = _IDENTITIES.setdefault(identity, ns)
    assert claimed == ns, f"replica identity {identity} is already used in namespace {claimed}: name it apart"
    port = free_port()
    endpoint = f"https://127.0.0.1:{port}/v1/progress"
    flags = (
        "--leader-elect",
        f"--leader-elect-namespace={ns}",
        f"--leader-elect-identity={identity}",
        f"--progress-bind-address=127.0.0.1:{port}",
        f"--progress-period={period}",
        *((f"--progress-url={endpoint}",) if url else ()),
        *more,
    )
    with controller_program(cluster.kubeconfig, ns, logs / f"{identity}.log", *flags):
        yield Replica(identity, endpoint)


def wait_to_lead(cluster: Cluster, ns: str, identity: str) -> None:
    """Until `identity` holds the controller's Lease in `ns` (30 s at most)."""
    wait_until(
        lambda: (
            cluster.get("lease", "torchrun-controller", "-n", ns)["spec"].get("holderIdentity") == identity
        ),
        30,
        message=f"{identity} to lead",
    )


def answers(url: str) -> bool:
    try:
        post(url, None, {})
    except OSError:
        return False
    return True


def post(url: str, token: str | None, body: dict[str, Any]) -> tuple[int, str]:
    """POST a report as the reporter does (the test bed's endpoint is self-signed: not verified)."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, context=UNVERIFIED, timeout=10) as resp:
            return resp.status, json.loads(resp.read())["message"]
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())["message"]


def token(bed: HasRest, pod: dict[str, Any] | None, audience: str = AUDIENCE) -> str:
    """A token of the pod's service account, bound to the pod (TokenRequest: what the kubelet
    projects into the sidecar); without a pod, bound to nothing."""
    spec: dict[str, Any] = {"audiences": [audience], "expirationSeconds": 600}
    sa = "default"
    if pod is not None:
        meta = pod["metadata"]
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}
        sa = pod["spec"].get("serviceAccountName") or "default"
    path = f"/api/v1/namespaces/{bed.namespace}/serviceaccounts/{sa}/token"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    answer = bed.rest.request("create", "POST", path, "serviceaccounts/token", body=body)
    return str(answer["status"]["token"])


def report(job: str, step: int, total: int = 100, age: float = 0.0) -> dict[str, Any]:
    return {
        "job": job,
        "record": {"step": step, "total_steps": total, "loss": 1.5},
        "secondsSinceChange": age,
    }


def worker_pod(
    cluster: Cluster, ns: str, job: str, index: int = 0, not_uids: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The running worker pod of `job`'s node `index` (waits for it), none of `not_uids`: after a
    restart the old attempt's pods stay Running until the garbage collector deletes them."""

    def running() -> dict[str, Any] | None:
        selector = f"torchrun-job-name={job},torchrun.ai/role=worker"
        for pod in cluster.get("pods", "-n", ns, "-l", selector)["items"]:
            index_of = pod["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index")
            if (
                index_of == str(index)
                and pod["status"].get("phase") == "Running"
                and not pod["metadata"].get("deletionTimestamp")
                and pod["metadata"]["uid"] not in not_uids
            ):
                return dict(pod)
        return None

    found: dict[str, Any] = wait_until(running, 60, message=f"{job}'s worker {index} running")
    return found
