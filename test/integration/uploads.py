"""Helpers of the tests that play `kubectl torchrun`'s upload: the archive it packs, the sync pod
it waits for, and the upload itself through the kube-apiserver's exec endpoint."""

from __future__ import annotations

import hashlib
import subprocess

from sync_archives import file, tar_gz
from testbed import Cluster, wait_until

Files = dict[str, bytes]


def archive(files: Files) -> bytes:
    """A tar.gz of `files` as the plugin writes one."""
    return tar_gz(file(name, data) for name, data in sorted(files.items()))


POD_START = 120  # seconds: scheduler, node agent and kwok on a 2-core machine running two test beds


def pod_running(cluster: Cluster, ns: str, name: str) -> bool:
    pods = cluster.get("pods", "-n", ns, "--field-selector", f"metadata.name={name}")["items"]
    return bool(pods) and pods[0]["status"].get("phase") == "Running"


def wait_running(cluster: Cluster, ns: str, name: str, timeout: float = POD_START) -> None:
    """Wait for pod `name` to be Running; on timeout fail with where it stood: its phase, node,
    conditions and annotations, its claims' phases, its Events and the node agent's log lines
    naming it (the scheduler, the node agent and kwok each take a part of a sync pod's start)."""
    try:
        wait_until(lambda: pod_running(cluster, ns, name), timeout, message=f"{name} running")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{pod_diagnosis(cluster, ns, name)}") from exc


def pod_diagnosis(cluster: Cluster, ns: str, name: str) -> str:
    """What the control plane and the node agent say about pod `name` (best effort, for a failure
    message)."""
    lines: list[str] = []
    pods = cluster.get("pods", "-n", ns, "--field-selector", f"metadata.name={name}")["items"]
    if not pods:
        lines.append(f"pod {ns}/{name}: not found")
    for pod in pods:
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        lines.append(f"pod {ns}/{name}: phase={status.get('phase')} node={spec.get('nodeName')}")
        lines.append(f"  annotations: {sorted(pod['metadata'].get('annotations') or {})}")
        for c in status.get("conditions") or []:
            state = f"{c.get('type')}={c.get('status')} {c.get('reason')}"
            lines.append(f"  condition {state}: {c.get('message')}")
        for volume in spec.get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                got = cluster.get("pvc", "-n", ns, "--field-selector", f"metadata.name={claim}")["items"]
                phase = got[0].get("status", {}).get("phase") if got else "not found"
                lines.append(f"  claim {claim}: {phase}")
    events = cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")["items"]
    for e in events:
        source = (e.get("source") or {}).get("component") or e.get("reportingComponent")
        lines.append(f"  event {e.get('reason')} ({source}): {e.get('message')}")
    if cluster.node_agent_log.exists():
        text = cluster.node_agent_log.read_text(errors="replace")
        mine = [line for line in text.splitlines() if name in line]
        lines.extend(f"  node agent: {line}" for line in mine[-20:])
    return "\n".join(lines)


def upload(
    cluster: Cluster, ns: str, pod: str, data: bytes, generation: int, sha: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`receive` through the kube-apiserver's exec endpoint, as the plugin does (declared size)."""
    sha = sha or hashlib.sha256(data).hexdigest()
    command = ["python", "-m", "controller.sync", "receive", "--generation", str(generation)]
    command += ["--size", str(len(data)), "--sha256", sha]
    return subprocess.run(
        [str(cluster.kubectl_path), "--kubeconfig", str(cluster.kubeconfig), "exec", "-i", "-n", ns, pod,
         "-c", "sync", "--", *command],
        input=data, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
