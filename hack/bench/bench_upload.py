"""Upload throughput of `kubectl torchrun`: an archive through the kube-apiserver's exec endpoint
into the sync program, end to end until `receive` has written the marker (timed inside the
plugin's process, from opening the exec session to the marker coming back), against the same
bytes streamed by a bare `kubectl exec -i ... head -c N > file` into a sync pod of the same kind
(target ≥ 0.8×), and the plugin's peak RSS for two archive sizes (it must not grow with the
archive).

Runs a private control plane with the test bed's node agent (sync pods run the sync program as
local processes, exec goes through kwok), the controller for one namespace, and for each
measurement a fresh TorchrunJob whose sync pod waits for the upload. The archive holds
incompressible random files, so gzip neither helps nor hides the transport.

    python hack/bench/bench_upload.py [--mb 200] [--small-mb 20] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from common import REPO, control_plane, table, torchrunjob

from controller.plugin.archive import Archive, write_archive
from controller.plugin.kube import Kube, load_target
from controller.plugin.pack import scan
from controller.plugin.upload import upload

NS = "bench"
QUEUE = {
    "apiVersion": "torchrun.ai/v1alpha1",
    "kind": "TorchrunQueue",
    "metadata": {"name": "bench"},
    "spec": {"nodeResources": {"gpus": 8, "cpus": "90", "memory": "900Gi"}, "image": "bench:1"},
}


def kubectl(kubeconfig: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    kube = Path(os.environ.get("KUBECTL", "kubectl"))
    return subprocess.run(
        [str(kube), "--kubeconfig", str(kubeconfig), *args], input=data, capture_output=True, check=True
    )


def kubectl_path() -> str:
    """The kubectl built with the test bed's control plane."""
    lib = REPO / "hack" / "testbed" / "lib.sh"
    out = subprocess.run(
        ["bash", "-c", f'source "{lib}"; echo "$KUBE_BIN/kubectl"'],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "kubectl"


def make_tree(root: Path, megabytes: int, files: int = 20) -> None:
    root.mkdir(parents=True)
    per_file = megabytes * 1024 * 1024 // files
    for i in range(files):
        (root / f"shard-{i:03d}.bin").write_bytes(os.urandom(per_file))
    (root / "train.py").write_text("print('bench')\n")


def pack(root: Path, out: Path) -> dict[str, object]:
    """The plugin's own packer and archive writer: size and checksum of what it would send."""
    tree = scan(root)
    with out.open("wb") as f:
        archive = write_archive(tree, f)
    return {"size": archive.size, "sha256": archive.sha256}


def sync_pod_ready(kubeconfig: Path, job: str) -> str:
    body = torchrunjob(job, "bench", 1, workspace={"source": "upload"})
    kubectl(kubeconfig, "apply", "-n", NS, "-f", "-", data=json.dumps(body).encode())
    pod = f"{job}-sync-0"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = subprocess.run(
            [os.environ.get("KUBECTL", "kubectl"), "--kubeconfig", str(kubeconfig),
             "get", "pod", pod, "-n", NS, "-o", "jsonpath={.status.phase}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if got.stdout == "Running":
            return pod
        time.sleep(0.5)
    raise SystemExit(f"{pod} never ran")


def timed(cmd: list[str], work: Path, data_path: Path | None = None) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB, GNU time's %M: the child's own), output of `cmd`."""
    stats = work / "time.out"
    started = time.perf_counter()
    with data_path.open("rb") if data_path else open(os.devnull, "rb") as stdin:
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", str(stats), *cmd],
            stdin=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed: {proc.stderr.strip()[-400:]}")
    return elapsed, int(stats.read_text().split()[-1]), proc.stdout


def child_upload(kubeconfig: str, pod_job: str, archive_path: str, size: int, sha: str) -> None:
    """In its own process (for its RSS): the plugin's upload, exactly as `submit` runs it."""
    kube = Kube(load_target(kubeconfig, None, NS))
    archive = Archive(sha256=sha, size=size, files=0, bytes=0)
    started = time.perf_counter()  # the upload itself: Python's start-up is not the transport's
    marker = upload(kube, pod_job, 0, archive, Path(archive_path), lambda _: None)
    print(json.dumps({"marker": marker, "seconds": time.perf_counter() - started}))


def measure(kubeconfig: Path, work: Path, megabytes: int, index: int) -> dict[str, float]:
    tree, archive_path = work / f"tree-{megabytes}-{index}", work / f"a-{megabytes}-{index}.tar.gz"
    make_tree(tree, megabytes)
    meta = pack(tree, archive_path)
    size, sha = int(meta["size"]), str(meta["sha256"])  # type: ignore[call-overload]
    base_pod = sync_pod_ready(kubeconfig, f"base{megabytes}-{index}")
    kube = os.environ.get("KUBECTL", "kubectl")
    bare = [kube, "--kubeconfig", str(kubeconfig), "exec", "-i", "-n", NS, base_pod, "-c", "sync", "--",
            "sh", "-c", f"head -c {size} > blob"]  # fmt: skip
    bare_s, _, _ = timed(bare, work, archive_path)
    job = f"up{megabytes}-{index}"
    sync_pod_ready(kubeconfig, job)
    plugin = [sys.executable, __file__, "--child", str(kubeconfig), job, str(archive_path), str(size), sha]
    _, rss_kib, out = timed(plugin, work)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["marker"].get("sha256") == sha, result
    plugin_s = float(result["seconds"])
    return {"mb": size / 1e6, "bare_s": bare_s, "plugin_s": plugin_s, "rss_mib": rss_kib / 1024}


def measure_all(
    kubeconfig: Path, work: Path, log: TextIO, sizes: tuple[int, ...], repeat: int
) -> list[list[str]]:
    """The controller runs for the namespace while each size is measured `repeat` times."""
    controller = subprocess.Popen(
        [sys.executable, "-m", "controller.cmd.main", "--kubeconfig", str(kubeconfig), "--namespace", NS,
         "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    rows = []
    try:
        for size in sizes:
            for i in range(repeat):
                r = measure(kubeconfig, work, size, i)
                rows.append(
                    [f"{r['mb']:.0f}", f"{r['bare_s']:.2f}", f"{r['mb'] / r['bare_s']:.1f}",
                     f"{r['plugin_s']:.2f}", f"{r['mb'] / r['plugin_s']:.1f}",
                     f"{r['bare_s'] / r['plugin_s']:.2f}", f"{r['rss_mib']:.0f}"]
                )  # fmt: skip
    finally:
        controller.terminate()
        controller.wait(timeout=30)
    return rows


def run(mb: int, small_mb: int, repeat: int) -> None:
    with control_plane(nodes=1) as kubeconfig, tempfile.TemporaryDirectory(prefix="bench-upload-") as tmp:
        os.environ.setdefault("KUBECTL", kubectl_path())
        kubectl(kubeconfig, "apply", "--server-side", "-f", str(REPO / "crd"))
        kubectl(kubeconfig, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        kubectl(kubeconfig, "create", "namespace", NS)
        kubectl(kubeconfig, "apply", "-f", "-", data=json.dumps(QUEUE).encode())
        with (Path(tmp) / "controller.log").open("w") as log:
            rows = measure_all(kubeconfig, Path(tmp), log, (small_mb, mb), repeat)
    print(
        table(
            [
                "archive MB",
                "bare exec s",
                "bare MB/s",
                "plugin s",
                "plugin MB/s",
                "plugin/bare",
                "plugin peak RSS MiB",
            ],
            rows,
        )
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kubeconfig, job, path, size, sha = sys.argv[2:7]
        child_upload(kubeconfig, job, path, int(size), sha)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=200, help="the big archive, MB (default 200)")
    p.add_argument("--small-mb", type=int, default=20, help="the small archive, MB (default 20)")
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    run(a.mb, a.small_mb, a.repeat)


if __name__ == "__main__":
    main()
