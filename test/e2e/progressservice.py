"""Two controller replicas behind the shipped progress Service on the real node, and a job whose
reporter's final flush must land: shared by test_realnode_progress_service.py (3 runs) and
hack/bench/progress_service.py (20 in a row).

The controller runs as the shipped Deployment (`kubectl apply -k config/`) on the real node: its
pods reach the API server through the `kubernetes` Service (in-cluster config, kube-proxy), and
the reporters reach the controller through `torchrun-controller-progress` by its DNS name
(CoreDNS) and ClusterIP (kube-proxy) — the cluster routes every report, nothing here picks an
address. Test-only changes to the shipped manifests, each said where it is made (`install`): the
image (this checkout's, imported on the node), a nodeSelector and toleration for the real node,
`--sync-image` and `--progress-period=5`. The Deployment's podAntiAffinity is
`preferred...`, so both replicas fit on the one node as shipped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from plugincli import PLUGIN, plugin_env
from realnodes import RealNode
from testbed import (
    CHART,
    REPO,
    Cluster,
    condition,
    helm_binary,
    wait_until,
)

SYSTEM = "torchrun-system"
SERVICE = "torchrun-controller-progress"
LEADER_LABEL = "torchrun.ai/leader"
REAL_NODE_TOLERATION = {"key": "torchrun.ai/real-node", "operator": "Exists", "effect": "NoSchedule"}
REPORT_STEPS = Path(__file__).parent / "realnode" / "report_steps.py"
STEPS = 20


def shipped_config(cluster: Cluster) -> list[dict[str, Any]]:
    """`kubectl kustomize config/`: what `kubectl apply -k config/` would apply."""
    out = cluster.kubectl("kustomize", str(REPO / "config")).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def install(real: RealNode, service_selects_every_replica: bool = False) -> None:
    """The shipped config/ with the test-only changes of the module docstring, both replicas
    Ready and one leading. `service_selects_every_replica` puts back the progress Service of
    before the leader label (it selected both replicas): the benchmark's comparison only."""
    image = real.images["CONTROLLER_IMAGE"]
    docs = shipped_config(real.cluster)
    for doc in docs:
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            (c,) = pod["containers"]
            c["image"] = image  # test-only: this checkout's image, imported on the node
            c["args"] += [f"--sync-image={image}", "--progress-period=5"]  # test-only
            # test-only: on the real node
            pod["nodeSelector"] = {**pod.get("nodeSelector", {}), "kubernetes.io/hostname": real.name}
            pod["tolerations"] = [
                {"key": "torchrun.ai/real-node", "operator": "Exists", "effect": "NoSchedule"}
            ]
        if service_selects_every_replica and doc["kind"] == "Service" and doc["metadata"]["name"] == SERVICE:
            doc["spec"]["selector"].pop(LEADER_LABEL)
    text = "".join("---\n" + yaml.safe_dump(d) for d in docs)
    real.cluster.kubectl("apply", "--server-side", "-f", "-", input=text)
    wait_until(
        lambda: ready_replicas(real.cluster) == 2, 240, interval=1, message=diagnose_system(real.cluster)
    )
    wait_until(lambda: leader_pod(real.cluster), 120, interval=0.5, message="a replica to lead")


def remove_config(real: RealNode) -> None:
    """`kubectl delete -k config/`, and wait until its controller pods are gone (they stop leading
    and drain first), so another install is the only controller."""
    real.cluster.kubectl("delete", "-k", str(REPO / "config"), "--ignore-not-found", "--wait=false")
    wait_until(lambda: not replicas(real.cluster), 120, interval=1, message="config/'s controller pods gone")


def chart_test_values(real: RealNode) -> dict[str, Any]:
    """The chart's values for the real node: the same test-only changes as `install`'s."""
    image = real.images["CONTROLLER_IMAGE"]
    repository, _, tag = image.rpartition(":")
    return {
        "image": {"repository": repository, "tag": tag},  # test-only: this checkout's image
        "flags": {"sync-image": image, "progress-period": 5},  # test-only
        "nodeSelector": {"kubernetes.io/hostname": real.name},  # test-only
        "tolerations": [REAL_NODE_TOLERATION],  # test-only
    }


def install_chart(real: RealNode, namespace: str, values: Path) -> str:
    """`helm install` of charts/torchrun-controller into `namespace`, made first as
    docs/install.md says (Pod Security "restricted" enforced), with `chart_test_values` written
    to `values`; both replicas Ready and one leading. Returns helm's output."""
    real.cluster.kubectl("create", "namespace", namespace)
    real.cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    values.write_text(yaml.safe_dump(chart_test_values(real)))
    proc = subprocess.run(
        [str(helm_binary()), "install", "torchrun-controller", str(CHART), "--kubeconfig",
         str(real.cluster.kubeconfig), "--namespace", namespace, "-f", str(values)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"helm install exited {proc.returncode}: {proc.stderr}"
    wait_until(
        lambda: ready_replicas(real.cluster, namespace) == 2,
        240,
        interval=1,
        message=diagnose_system(real.cluster, namespace),
    )
    wait_until(lambda: leader_pod(real.cluster, namespace), 120, interval=0.5, message="a replica to lead")
    return proc.stdout


def ready_replicas(cluster: Cluster, namespace: str = SYSTEM) -> int:
    status = cluster.get("deployment", "torchrun-controller", "-n", namespace).get("status") or {}
    return int(status.get("readyReplicas") or 0)


def replicas(cluster: Cluster, namespace: str = SYSTEM) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = cluster.get(
        "pods", "-n", namespace, "-l", "app.kubernetes.io/name=torchrun-controller"
    )["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def leader_pod(cluster: Cluster, namespace: str = SYSTEM) -> str:
    """The pod whose replica holds the Lease (identity `<hostname>_<random>`; a pod's hostname is
    its name), or ""."""
    proc = cluster.kubectl("get", "lease", "torchrun-controller", "-n", namespace, "-o", "json", check=False)
    if proc.returncode != 0:
        return ""
    holder = str(yaml.safe_load(proc.stdout)["spec"].get("holderIdentity") or "")
    return holder.rpartition("_")[0]


def endpoints(cluster: Cluster, namespace: str = SYSTEM) -> set[str]:
    """The pods the progress Service routes to (its EndpointSlices)."""
    slices = cluster.get("endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={SERVICE}")
    return {
        e["targetRef"]["name"]
        for s in slices["items"]
        for e in s.get("endpoints") or ()
        if e.get("targetRef") and (e.get("conditions") or {}).get("ready")
    }


def reports(cluster: Cluster, namespace: str = SYSTEM) -> dict[str, dict[str, float]]:
    """Each replica's `torchrun_progress_reports_total` by result (its /metrics, read from this
    host at the pod's address on the bridge)."""
    out = {}
    for pod in replicas(cluster, namespace):
        ip = pod["status"].get("podIP")
        if not ip:
            continue
        with urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=10) as resp:
            text = resp.read().decode()
        counts = {
            m.group(1): float(m.group(2))
            for m in re.finditer(r'^torchrun_progress_reports_total\{result="(\d+)"\} (\S+)$', text, re.M)
        }
        out[pod["metadata"]["name"]] = counts
    return out


def make_queue(real: RealNode) -> str:
    """A 1-GPU queue pinned to the real node, running Debian's torch image as a non-root user."""
    name = "progress-service"
    real.cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunQueue",
            "metadata": {"name": name},
            "spec": {
                "nodeResources": {"gpus": 1, "cpus": "500m", "memory": "1Gi"},
                "image": real.images["TRAIN_IMAGE"],
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000},
                "storage": {"workspace": {"sizePerGPU": "1Gi"}, "shmSizePerGPU": "128Mi"},
                "scheduling": {
                    "nodeSelector": {"kubernetes.io/hostname": real.name},
                    "tolerations": [REAL_NODE_TOLERATION],
                },
            },
        }
    )
    try:
        wait_until(
            lambda: (
                (condition(real.cluster.get("torchrunqueue", name), "Ready") or {}).get("status") == "True"
            ),
            60,
            message=f"queue {name} Ready",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose_system(real.cluster)}") from exc
    return name


@dataclass
class Run:
    name: str
    last_step: int | None  # status.progress.step once the job succeeded
    seconds: float
    leader: str
    upload_retries: int = 0


def final_step_run(
    real: RealNode, namespace: str, queue: str, name: str, project: Path, system: str = SYSTEM
) -> Run:
    """One job of `report_steps.py`: it reports STEPS steps, the last at its exit; the worker
    pod's reporter sidecar pushes it through the Service, on SIGTERM (its final flush) unless its
    regular push came first; `system` is the controller's namespace. Returns
    the step the job's status ends at (None: never reached within a minute of success)."""
    cluster, started = real.cluster, time.monotonic()
    cluster.apply(
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": name},
            "spec": {
                "jobQueue": queue,
                "numNodes": 1,
                "command": f"python {REPORT_STEPS.name} --steps {STEPS}",
                "workspace": {"source": "upload"},
            },
        },
        namespace,
    )
    # the upload is not what is measured: one failed upload (seen once in 40: the sync pod's
    # exec ended 137 on this loaded machine) is retried as the plugin's error says, and counted
    errors = []
    for _ in range(2):
        sync = subprocess.run(
            [str(PLUGIN), "-n", namespace, "sync", name, "--detach"],
            cwd=project,
            env=plugin_env(cluster),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if sync.returncode == 0:
            break
        errors.append(sync.stderr.strip().splitlines()[-1:])
    assert sync.returncode == 0, f"upload failed twice: {errors}"

    def status() -> dict[str, Any]:
        got: dict[str, Any] = cluster.get("torchrunjob", name, "-n", namespace).get("status") or {}
        return got

    def finished() -> dict[str, Any] | None:
        st = status()
        assert st.get("phase") != "Failed", st
        return st if st.get("phase") == "Succeeded" else None

    wait_until(finished, 300, interval=0.5, message=f"job {name} to succeed")
    try:
        final = wait_until(
            lambda: (status().get("progress") or {}).get("step") == STEPS and status(),
            60,
            interval=0.5,
            message=f"job {name}'s last step in its status",
        )
        step: int | None = final["progress"]["step"]
    except AssertionError:
        step = (status().get("progress") or {}).get("step")
    leader = leader_pod(cluster, system)
    cluster.kubectl(
        "delete", "torchrunjob", name, "-n", namespace, "--wait=true", "--timeout=120s", check=False
    )
    return Run(name, step, time.monotonic() - started, leader, len(errors))


def project(tmp: Path) -> Path:
    """A project directory holding report_steps.py."""
    path = tmp / "project"
    path.mkdir(exist_ok=True)
    shutil.copy(REPORT_STEPS, path / REPORT_STEPS.name)
    return path


def diagnose_system(cluster: Cluster, namespace: str = SYSTEM) -> str:
    """For a message: the controller's pods, their events and their logs."""
    out = [cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout]
    out.append(cluster.kubectl("get", "events", "-n", namespace, check=False).stdout[-3000:])
    for pod in cluster.get("pods", "-n", namespace)["items"]:
        name = pod["metadata"]["name"]
        out.append(f"-- {name}: {pod['status'].get('reason')} {pod['status'].get('message')}")
        for previous in ("--previous=true", "--previous=false"):
            got = cluster.kubectl("logs", "-n", namespace, name, "--tail=20", previous, check=False)
            out.append(f"{previous}:\n{(got.stdout + got.stderr)[-2500:]}")
    return "\n".join(out)
