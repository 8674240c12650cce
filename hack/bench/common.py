"""Shared benchmark plumbing: a private control plane for the run (kube-controller-manager's client
rate a knob, restarted at another), kubectl at the pinned version, the bench's REST client, the
TorchrunJob every bench submits, sums of a /metrics scrape, RSS and CPU readings of a process, a
table printer."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from controller.rest import RESTClient, load_config
from controller.rest.resources import JOBS, NAMESPACES, PODS

REPO = Path(__file__).resolve().parents[2]
CONTROLPLANE = REPO / "hack" / "controlplane.sh"


KCM_DEFAULT = (20, 30)  # kube-controller-manager's --kube-api-qps / --kube-api-burst, Kubernetes' own
KCM_PRODUCTION = (100, 200)  # a common production setting
# every workload runs at both, by these names
KCM_SETTINGS = {"default 20/30": KCM_DEFAULT, "production 100/200": KCM_PRODUCTION}
BENCH_USER_AGENT = "torchrun-bench"  # the bench's own writes, told apart in the audit log
API_VERSION = "torchrun.ai/v1alpha1"


def _controlplane_env(run_dir: Path, **settings: object) -> dict[str, str]:
    """hack/controlplane.sh's environment for the state dir `run_dir` (TORCHRUN_<KEY> settings)."""
    env = {**os.environ, "TORCHRUN_RUN_DIR": str(run_dir)}
    env.update({f"TORCHRUN_{k.upper()}": str(v) for k, v in settings.items() if v is not None})
    return env


@contextlib.contextmanager
def control_plane(
    nodes: int = 4, pods_per_node: int = 110, kcm: tuple[int, int] = KCM_DEFAULT
) -> Iterator[Path]:
    """Start a fresh control plane in a temporary state dir, kube-controller-manager at client rate
    `kcm` (QPS, burst); yield its admin kubeconfig (its state dir is the kubeconfig's parent)."""
    run_dir = Path(tempfile.mkdtemp(prefix="torchrun-bench-"))
    env = _controlplane_env(run_dir, nodes=nodes, node_pods=pods_per_node, kcm_qps=kcm[0], kcm_burst=kcm[1])
    try:
        subprocess.run([str(CONTROLPLANE), "up"], env=env, check=True, stdout=subprocess.DEVNULL)
        yield run_dir / "admin.kubeconfig"
    finally:
        subprocess.run([str(CONTROLPLANE), "down"], env=env, check=False)
        shutil.rmtree(run_dir, ignore_errors=True)


def restart_kube_controller_manager(kubeconfig: Path, kcm: tuple[int, int], rest: RESTClient) -> None:
    """Run the control plane's kube-controller-manager again at client rate `kcm` (QPS, burst); same
    ports and data, so the objects and every other component stay as they are. Returns once its
    Job controller creates pods (a probe Job, in a namespace deleted after)."""
    env = _controlplane_env(kubeconfig.parent, kcm_qps=kcm[0], kcm_burst=kcm[1])
    for step in ("stop", "start"):
        subprocess.run([str(CONTROLPLANE), step, "kube-controller-manager"], env=env, check=True)
    ns = "kcm-probe"
    rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    container = {"name": "c", "image": "busybox"}
    probe = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "probe"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }
    rest.create(JOBS, probe, ns)
    deadline = time.monotonic() + 120
    while not rest.list(PODS, ns)["items"]:
        if time.monotonic() > deadline:
            raise TimeoutError("kube-controller-manager's Job controller created no pod in 120 s")
        time.sleep(0.5)
    kubectl(kubeconfig, "delete", "namespace", ns, "--timeout=600s")


def kcm_pid(kubeconfig: Path) -> int:
    """The control plane's kube-controller-manager process."""
    return int((kubeconfig.parent / "pids" / "kube-controller-manager.pid").read_text())


def rest_client(kubeconfig: Path | str, **settings: Any) -> RESTClient:
    """A client on `kubeconfig`; `settings` are `RESTClient`'s keywords."""
    return RESTClient(load_config(str(kubeconfig)), **settings)


def bench_client(kubeconfig: Path) -> RESTClient:
    """The bench's own client: fast enough never to be what is measured."""
    return rest_client(kubeconfig, qps=2000, burst=2000, pool_size=32, user_agent=BENCH_USER_AGENT)


def torchrunjob(
    name: str, queue: str, nodes: int = 2, *, api_version: str = API_VERSION, **spec: Any
) -> dict[str, Any]:
    """A TorchrunJob of `nodes` nodes of `queue` running `python train.py` with workspace none
    (nothing to sync); `spec` adds or replaces fields of its spec."""
    return {
        "apiVersion": api_version,
        "kind": "TorchrunJob",
        "metadata": {"name": name},
        "spec": {
            "jobQueue": queue,
            "numNodes": nodes,
            "command": "python train.py",
            "workspace": {"source": "none"},
            **spec,
        },
    }


def metric_sums(text: str, label: str) -> dict[str, float]:
    """Prometheus text: the sum of every sample per metric name, over the samples whose labels
    contain `label` (a `name="value"` pair)."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line or label not in line:
            continue
        name, value = line.split("{", 1)[0], float(line.rsplit(" ", 1)[1])
        sums[name] = sums.get(name, 0.0) + value
    return sums


def pins() -> dict[str, str]:
    """hack/versions.env: every pinned version by its name."""
    text = (REPO / "hack" / "versions.env").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def kubectl_binary() -> Path:
    """The kubectl built with the control plane (hack/build-controlplane.sh), at the pinned version."""
    cache = os.environ.get("TORCHRUN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torchrun-controller"
    )
    return Path(cache) / "bin" / f"kube-{pins()['KUBE_VERSION']}" / "kubectl"


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    """Run kubectl on `kubeconfig`; its stdout (a failure raises, with kubectl's stderr)."""
    proc = subprocess.run(
        [str(kubectl_binary()), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(f"kubectl {' '.join(args[:3])}: {proc.stderr.strip()}")
    return proc.stdout


def install_crds(kubeconfig: Path, *paths: Path) -> None:
    """Apply the CRDs in `paths` (files or directories) server-side and wait until they are served."""
    files = [str(f) for p in paths for f in (sorted(p.glob("*.yaml")) if p.is_dir() else [p])]
    kubectl(kubeconfig, "apply", "--server-side", *[a for f in files for a in ("-f", f)])
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=120s", "crd", "--all")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a live process has used so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int | str = "self", field: str = "VmRSS") -> int:
    """Resident memory of a process in KiB (`VmHWM` for its peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else float("nan")


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)
