"""Shared benchmark plumbing: a private control plane for the run (kube-controller-manager's client
rate a knob), kubectl at the pinned version, RSS and CPU readings of a process, a table printer."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTROLPLANE = REPO / "hack" / "controlplane.sh"


KCM_DEFAULT = (20, 30)  # kube-controller-manager's --kube-api-qps / --kube-api-burst, Kubernetes' own
KCM_PRODUCTION = (100, 200)  # a common production setting
# every workload runs at both, by these names
KCM_SETTINGS = {"default 20/30": KCM_DEFAULT, "production 100/200": KCM_PRODUCTION}


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


def restart_kube_controller_manager(kubeconfig: Path, kcm: tuple[int, int]) -> None:
    """Run the control plane's kube-controller-manager again at client rate `kcm` (QPS, burst); same
    ports and data, so the objects and every other component stay as they are."""
    env = _controlplane_env(kubeconfig.parent, kcm_qps=kcm[0], kcm_burst=kcm[1])
    for step in ("stop", "start"):
        subprocess.run([str(CONTROLPLANE), step, "kube-controller-manager"], env=env, check=True)


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
