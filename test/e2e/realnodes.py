"""The real nodes of the e2e tests: a control plane of its own per node, and the host they share.

`real_node(name, index)` starts a control plane with the real node `realnode-<index>`
(hack/testbed/realnode.sh, `TORCHRUN_REAL_NODE=1`, one fake node beside it), installs the CRDs,
and on exit runs `down`, which must leave nothing of that node on the host (`leftovers`). Two
nodes of different indexes may run at once (with TORCHRUN_TEST_REAL_NODES=2 the suite runs
`realnode-0` and `realnode-1` on two pytest workers, test/conftest.py): each has its own bridge,
subnet, cgroup root, containerd root and nftables guard; only node 0 runs kube-proxy (its tables
have host-wide names), so only its pods reach ClusterIPs. What is host-wide (sysctls, fixed
directories, /run/netns) is recorded by the first node up in `HOST_RECORD` and put back by the
last node down.

`host_state(index, run_dir)` is what node `index` may change on the host, split into what is its
alone (`own`: its links, mounts, cgroups) and what is shared with the other nodes (`shared`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from testbed import CONTROLPLANE, REPO, Cluster, cache_dir, kubectl_binary

# hack/testbed/realnode.sh's REAL_NODES_HOST: the record of the host before the first node, and
# one file per node up under holders/
HOST_RECORD = Path("/run/torchrun-realnodes")
# what kubelet sets when it starts (protectKernelDefaults: false) and `down` must put back, plus
# what a bridge CNI plugin may turn on
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
)
HOST_PATHS = ("/var/log/containers", "/var/log/pods", "/run/netns", "/run/containerd", "/var/lib/kubelet")
TAINT = "torchrun.ai/real-node"


@dataclass
class RealNode:
    cluster: Cluster
    env: dict[str, str]
    images: dict[str, str]  # PAUSE_IMAGE, CONTROLLER_IMAGE, TRAIN_IMAGE
    index: int = 0

    @property
    def name(self) -> str:
        return f"realnode-{self.index}"

    @property
    def scheduling(self) -> dict[str, Any]:
        """A queue's placement on this node: its name, and the taint that keeps every other pod off."""
        return {
            "nodeSelector": {"kubernetes.io/hostname": self.name},
            "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        }


def cgroup_name(index: int) -> str:
    """realnode.sh's REAL_NODE_CGROUP: node 0 keeps the name it always had."""
    return "torchrun-realnode" + (str(index) if index else "")


def bridge_name(index: int) -> str:
    return f"trn-realnode{index}"


def run_dir_of(name: str) -> Path:
    """The run directory of `real_node(name, ...)` in this process."""
    # a short name: containerd's socket lives under it, and a unix socket's path is at most 107
    # bytes (`run-bench-progress-service-<pid>` made ctr's dial fail: containerd never answered)
    return cache_dir() / f"run-{name}-{os.getpid()}"


@contextmanager
def real_node(name: str, index: int = 0) -> Iterator[RealNode]:
    """A control plane of its own with the real node `realnode-<index>` (one fake node beside it),
    the CRDs installed; `down` on exit, which must leave nothing of the node on the host."""
    if os.geteuid() != 0:
        raise RuntimeError("the real node needs root (containerd, kubelet, cgroups, a bridge, kube-proxy)")
    run_dir = run_dir_of(name)
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {
        **os.environ,
        "TORCHRUN_RUN_DIR": str(run_dir),
        "TORCHRUN_REAL_NODE": "1",
        "TORCHRUN_REAL_NODE_INDEX": str(index),
        "TORCHRUN_NODES": "1",
    }
    env.pop("TORCHRUN_REAL_NODE_SUBNET", None)  # each index has its own
    try:
        up = subprocess.run(
            [str(CONTROLPLANE), "up"], check=False, env=env, capture_output=True, text=True, timeout=3000
        )
        if up.returncode != 0:
            # the scripts' own lines (`[HH:MM:SS] ...`: what timed out) before the logs' tails
            said = "\n".join(x for x in up.stderr.splitlines() if re.match(r"\[\d\d:\d\d:\d\d\] ", x))
            raise RuntimeError(
                f"the control plane with the real node did not come up:\n{said}\n{up.stderr[-12000:]}"
            )
        images = dict(
            line.split("=", 1) for line in (run_dir / "realnode" / "images.env").read_text().splitlines()
        )
        cluster = Cluster(
            run_dir=run_dir, kubeconfig=run_dir / "admin.kubeconfig", kubectl_path=kubectl_binary()
        )
        cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crd"))
        cluster.wait_established()
        yield RealNode(cluster, env, images, index)
    finally:
        subprocess.run([str(CONTROLPLANE), "down"], env=env, check=False, timeout=300)
        left = leftovers(env)
        shutil.rmtree(run_dir, ignore_errors=True)
        if left.strip():
            raise RuntimeError(f"the real node left this on the host after down:\n{left}")


@contextmanager
def real_node_or_fail(name: str, index: int = 0) -> Iterator[RealNode]:
    """`real_node` for a fixture: a node that cannot come up or leaves something behind fails the
    test (or its teardown) with the control plane's own words."""
    try:
        with real_node(name, index) as node:
            yield node
    except RuntimeError as exc:
        pytest.fail(str(exc))


def leftovers(env: dict[str, str]) -> str:
    """`hack/controlplane.sh leftovers`: what the node left on the host; empty when clean."""
    return subprocess.run(
        [str(CONTROLPLANE), "leftovers"], env=env, check=False, capture_output=True, text=True, timeout=60
    ).stdout


def holders() -> list[str]:
    """The real nodes up on this host, as realnode.sh records them."""
    return sorted(p.name for p in (HOST_RECORD / "holders").glob("*"))


def host_record() -> dict[str, str]:
    """The host-wide record of the first node up: each sysctl's value before it, and `absent <path>`
    for each fixed directory that did not exist ({} when no node holds the host)."""
    path = HOST_RECORD / "host.saved"
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        kind, key, *value = line.split()
        if kind == "sysctl":
            out[key] = " ".join(value)
        elif kind == "absent":
            out[f"absent {key}"] = ""
    return out


def host_state(index: int, run_dir: Path) -> dict[str, Any]:
    """What node `index`, run from `run_dir`, may change on the host: `own` (the links no other
    node's bridge holds, the mounts outside every other run directory, its cgroups) and `shared`
    (the sysctls and fixed directories every node changes alike)."""
    others = [bridge_name(i) for i in range(10) if i != index]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    names = []
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        master = re.search(r" master (\S+) ", line)
        if name in others or (master and master.group(1) in others):
            continue  # another node's bridge, or a pod's veth on it
        names.append(name)
    mounts = [
        line
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if not re.search(r" \S*/run-[^/ ]+-\d+/", line) or f"{run_dir}/" in line
    ]
    if any(h != f"realnode-{index}" for h in holders()):
        # another node is up: a network namespace under /run/netns may be its pods'
        mounts = [m for m in mounts if " /run/netns/" not in m]
    hierarchies = [
        mount
        for _, mount, kind, *_ in (
            line.split() for line in Path("/proc/self/mounts").read_text().splitlines()
        )
        if kind in ("cgroup", "cgroup2")
    ]
    cgroups = sorted(
        f"{h}/{cgroup_name(index)}" for h in hierarchies if os.path.isdir(f"{h}/{cgroup_name(index)}")
    )
    sysctls = {
        key: subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, check=True).stdout.strip()
        for key in SYSCTLS
    }
    return {
        "own": {"links": sorted(names), "mounts": sorted(mounts), "cgroups": cgroups},
        "shared": {"sysctls": sysctls, "paths": {p: os.path.exists(p) for p in HOST_PATHS}},
    }
