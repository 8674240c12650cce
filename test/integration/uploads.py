"""Helpers of the tests that play `kubectl torchrun`'s upload: the archive it packs, the sync pod
it waits for, and the upload itself through the kube-apiserver's exec endpoint."""

from __future__ import annotations

import hashlib
import subprocess

from sync_archives import file, tar_gz
from testbed import Cluster

Files = dict[str, bytes]


def archive(files: Files) -> bytes:
    """A tar.gz of `files` as the plugin writes one."""
    return tar_gz(file(name, data) for name, data in sorted(files.items()))


def pod_running(cluster: Cluster, ns: str, name: str) -> bool:
    pods = cluster.get("pods", "-n", ns, "--field-selector", f"metadata.name={name}")["items"]
    return bool(pods) and pods[0]["status"].get("phase") == "Running"


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
