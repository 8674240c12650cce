"""Pod Security on the real control plane (docs/security.md): every pod the project makes is
admitted in a namespace enforcing Pod Security `restricted`, and a queue asking for more than that
(`debug.stackDumps`) is refused there by a condition, never by a worker Job whose pods never come.

The test bed's kube-apiserver runs its built-in PodSecurity admission (on by default, not disabled
by hack/controlplane.sh); the first test proves it refuses a pod that breaks the level, so the
others prove something. kwok plays the nodes: what is checked is admission, which is the API
server's own, not the containers' runtime.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jobs import make_job, queue_manifest
from testbed import Cluster, condition, wait_until

from controller.api import TorchrunJob, TorchrunQueue, resolve_topology
from controller.cmd.main import App
from controller.plugin.checkpoints import listing_pod
from controller.torchrunjob.manifests.launch import parse_command
from controller.torchrunjob.manifests.progress import ReporterSettings
from controller.torchrunjob.manifests.worker import build_worker_job, worker_pod

ENFORCE = "pod-security.kubernetes.io/enforce"
REFUSED = 'violates PodSecurity "restricted:latest"'


@pytest.fixture
def restricted(cluster: Cluster, namespace: str) -> str:
    """The test's namespace, enforcing Pod Security `restricted` (latest version)."""
    cluster.kubectl(
        "label", "namespace", namespace, f"{ENFORCE}=restricted", f"{ENFORCE}-version=latest", "--overwrite"
    )
    return namespace


@pytest.fixture
def make_queue(cluster: Cluster) -> Iterator[Callable[..., str]]:
    """A queue of a fresh name (spec as `queue_manifest` takes it), deleted after the test."""
    made: list[str] = []

    def make(outcome: str = "succeed", duration: str = "2s", **spec: Any) -> str:
        name = f"q-{uuid.uuid4().hex[:6]}"
        cluster.apply(queue_manifest(name, outcome, duration, **spec))
        made.append(name)
        return name

    yield make
    for name in made:
        cluster.kubectl("delete", "torchrunqueue", name, "--ignore-not-found", "--wait=false")


def dry_run(cluster: Cluster, ns: str, obj: dict[str, Any]) -> tuple[bool, str]:
    """(admitted, what kubectl said) of a server-side dry-run create of `obj` in `ns`."""
    proc = cluster.kubectl(
        "create", "-n", ns, "--dry-run=server", "-f", "-", input=json.dumps(obj), check=False
    )
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def tj(cluster: Cluster, ns: str, name: str = "train") -> dict[str, Any]:
    return cluster.get("torchrunjob", name, "-n", ns)


def phase_is(cluster: Cluster, ns: str, phase: str, name: str = "train") -> dict[str, Any] | None:
    obj = tj(cluster, ns, name)
    return obj if (obj.get("status") or {}).get("phase") == phase else None


def refusals(cluster: Cluster, ns: str) -> list[str]:
    """What kube-controller-manager's Job controller said when a pod of a worker Job was refused
    (its `FailedCreate` Events): a Job whose pods never appear."""
    events = cluster.get("events", "-n", ns, "--field-selector", "reason=FailedCreate")["items"]
    return [e["message"] for e in events]


def test_the_test_bed_enforces_pod_security(cluster: Cluster, restricted: str) -> None:
    """Without this, every other test here would pass on an API server that admits anything."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    admitted, said = dry_run(cluster, restricted, pod)
    assert not admitted and REFUSED in said, said


def code_claim(cluster: Cluster, ns: str) -> None:
    """A claim `code` holding `train.py`: the `pvc` workspace source, so the job has a sync pod."""
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "code"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    cluster.apply(claim, ns)
    bound = wait_until(
        lambda: (c := cluster.get("pvc", "code", "-n", ns))["status"].get("phase") == "Bound" and c,
        60,
        message="the source claim bound",
    )
    root = Path(cluster.get("pv", bound["spec"]["volumeName"])["spec"]["hostPath"]["path"])
    (root / "train.py").write_text("print('restricted')\n")


def test_a_restricted_namespace_runs_a_job_to_succeeded(
    cluster: Cluster,
    restricted: str,
    start_controller: Callable[..., App],
    make_queue: Callable[..., str],
) -> None:
    """Every kind of pod the controller makes, in one job: the sync pod (`pvc` source), the managed
    etcd (`etcd-v2`), the worker pods with their `prepare` and code-copy init containers and the
    reporter sidecar, a checkpoints volume; and the plugin's listing pod, dry-run beside them."""
    ns = restricted
    code_claim(cluster, ns)
    queue = make_queue(storage={"checkpoints": {"enabled": True}})
    start_controller()
    make_job(
        cluster,
        ns,
        queue,
        workspace={"source": "pvc", "pvc": {"claimName": "code"}},
        distributed={"rdzvBackend": "etcd-v2"},
    )
    done = wait_until(
        lambda: phase_is(cluster, ns, "Succeeded") or refusals(cluster, ns), 120, message="Succeeded"
    )
    assert isinstance(done, dict), f"the worker Job's pods were refused: {done}"
    roles = {p["metadata"]["labels"].get("torchrun.ai/role") for p in cluster.get("pods", "-n", ns)["items"]}
    assert {"sync", "worker"} <= roles, roles  # the etcd pod goes once the job finished

    worker_job = cluster.get("job", "train", "-n", ns)
    template = worker_job["spec"]["template"]["spec"]
    assert template["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in [*template["initContainers"], *template["containers"]]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"], c["name"]
        assert sc["runAsNonRoot"] is True, c["name"]

    listing = listing_pod(tj(cluster, ns), worker_job, "dry")
    admitted, said = dry_run(cluster, ns, listing)
    assert admitted, said


def test_stack_dumps_are_refused_in_a_restricted_namespace_by_a_condition(
    cluster: Cluster,
    restricted: str,
    start_controller: Callable[..., App],
    make_queue: Callable[..., str],
    record_property: Callable[[str, object], None],
) -> None:
    """A queue with `debug.stackDumps: true` runs the reporter sidecar as root with SYS_PTRACE,
    which `restricted` refuses: the job says so (`Admitted=False PodsForbidden`, naming the field
    and the namespace's policy) and no worker Job is made whose pods would never appear. Once the
    queue no longer asks for it, the job runs."""
    ns = restricted
    queue = make_queue(debug={"stackDumps": True})
    start_controller()
    make_job(cluster, ns, queue)
    refused = wait_until(
        lambda: (
            (o := tj(cluster, ns))
            and (c := condition(o, "Admitted"))
            and c["status"] == "False"
            and c["reason"] == "PodsForbidden"
            and o
        ),
        60,
        message="Admitted=False PodsForbidden",
    )
    message = condition(refused, "Admitted")["message"]
    assert "debug.stackDumps" in message and REFUSED in message and queue in message, message
    record_property("note", f"Admitted=False PodsForbidden: {message}")
    assert refused["status"]["phase"] == "Pending"
    assert cluster.kubectl("get", "job", "train", "-n", ns, check=False).returncode != 0
    assert not cluster.get("pods", "-n", ns, "-l", "torchrun.ai/role=worker")["items"]

    cluster.kubectl(
        "patch", "torchrunqueue", queue, "--type=merge", "-p", '{"spec":{"debug":{"stackDumps":false}}}'
    )
    wait_until(lambda: phase_is(cluster, ns, "Succeeded"), 90, message="Succeeded once the queue allows it")
    assert condition(tj(cluster, ns), "Admitted")["status"] == "True"


def test_an_in_place_worker_pod_is_admitted_in_a_restricted_namespace(
    cluster: Cluster, restricted: str
) -> None:
    """A job that restarts in place adds the supervisor's files to its worker pods (the control
    emptyDir, the workspace claim read-only in the torchrun container): still `restricted`."""
    queue = TorchrunQueue.from_json(queue_manifest("q", storage={"checkpoints": {"enabled": True}}))
    job = TorchrunJob.from_json(
        {
            "metadata": {"name": "train", "namespace": restricted, "uid": "u"},
            "spec": {
                "jobQueue": "q",
                "numNodes": 2,
                "command": "python train.py",
                "workspace": {"source": "upload"},
                "failurePolicy": {"restartMode": "InPlace"},
            },
        }
    )
    topology = resolve_topology(job.spec, queue.spec.node_resources)
    settings = ReporterSettings(url="https://controller.example:9443/v1/progress")
    built = build_worker_job(job, queue, topology, parse_command(job.spec.command), reporter=settings)
    pod = worker_pod(built)
    assert any(v["name"] == "torchrun-control" for v in pod["spec"]["volumes"])  # the fragment is there
    admitted, said = dry_run(cluster, restricted, pod)
    assert admitted, said
