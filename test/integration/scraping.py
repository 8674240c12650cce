"""Local processes for the tests that run the shipped monitoring: Debian's Prometheus on a free
port with a fresh data directory, and a real reporter sidecar (`python -m
controller.progress.sidecar.reporter`) for one worker pod, pushing with the token the kubelet
would project. Both are stopped on exit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from monitoring import prometheus_tool
from testbed import REPO, wait_until

from controller.rest import RESTClient

Result = dict[tuple[tuple[str, str], ...], float]  # a query's answer: labels → value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus(NamedTuple):
    url: str
    file_targets: Path  # the targets of the file_sd_configs pointing at it (see set_file_targets)
    started: float

    def query(self, expr: str) -> Result:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as resp:
            answer = json.load(resp)
        assert answer["status"] == "success", answer
        data = answer["data"]
        if data["resultType"] == "scalar":
            return {(): float(data["result"][1])}
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}

    def label_values(self, label: str, match: str) -> list[str]:
        url = f"{self.url}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": match})
        with urllib.request.urlopen(url, timeout=10) as resp:
            return sorted(json.load(resp)["data"])

    def set_file_targets(self, static_configs: list[dict[str, Any]]) -> None:
        """Replace the file-discovered targets (Prometheus watches the file)."""
        tmp = self.file_targets.with_suffix(".tmp")
        tmp.write_text(json.dumps(static_configs))
        tmp.rename(self.file_targets)

    def targets_up(self) -> dict[str, str]:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as resp:
            active = json.load(resp)["data"]["activeTargets"]
        return {t["labels"]["job"]: t["health"] for t in active}


@contextlib.contextmanager
def prometheus(workdir: Path, scrape_configs: list[dict[str, Any]], scrape: str) -> Iterator[Prometheus]:
    """Debian's prometheus on a free port with a fresh data directory, scraping `scrape_configs`
    every `scrape`; workdir/file-targets.json (empty at first) is the file a config's
    file_sd_configs may name."""
    file_targets = workdir / "file-targets.json"
    file_targets.write_text("[]")
    config = {
        "global": {"scrape_interval": scrape, "evaluation_interval": scrape},
        "scrape_configs": scrape_configs,
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    command = [
        str(prometheus_tool("prometheus")),
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with open(workdir / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url), 30, message=f"prometheus ready (log: {workdir / 'prometheus.log'})")
        yield Prometheus(url, file_targets, time.monotonic())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


class Reporter(NamedTuple):
    """A real reporter sidecar process (`python -m controller.progress.sidecar.reporter`) for one pod."""

    pod: dict[str, Any]
    address: str
    progress_file: Path
    proc: subprocess.Popen[bytes]

    def write(self, step: int, total: int) -> None:
        with open(self.progress_file, "a") as f:
            f.write(json.dumps({"step": step, "total_steps": total, "loss": 2.0 / step}) + "\n")


@contextlib.contextmanager
def reporter(pod: dict[str, Any], url: str, token: str, workdir: Path) -> Iterator[Reporter]:
    name = pod["metadata"]["name"]
    (workdir / f"{name}.token").write_text(token)
    address = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "TORCHRUN_PROGRESS_FILE": str(workdir / f"{name}.jsonl"),
        "TORCHRUN_PROGRESS_TOKEN_FILE": str(workdir / f"{name}.token"),
        "TORCHRUN_PROGRESS_URL": url,
        "TORCHRUN_JOB_NAME": pod["metadata"]["labels"]["torchrun-job-name"],
        "TORCHRUN_REPORTER_ADDRESS": address,
        "JOB_COMPLETION_INDEX": "0",
    }
    with open(workdir / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.progress.sidecar.reporter"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        yield Reporter(pod, address, workdir / f"{name}.jsonl", proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pod_token(rest: RESTClient, pod: dict[str, Any]) -> str:
    """The token the kubelet projects into the sidecar: bound to the pod, for the controller."""
    meta = pod["metadata"]
    spec = {
        "audiences": ["torchrun-controller"],
        "expirationSeconds": 600,
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]},
    }
    sa = pod["spec"].get("serviceAccountName") or "default"
    path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{sa}/token"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    return str(rest.request("create", "POST", path, "serviceaccounts/token", body=body)["status"]["token"])
