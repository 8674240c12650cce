"""The controllers a benchmark runs as processes on the control plane: this checkout's
`torchrun-controller`, and Kubeflow's training-operator (hack/testbed/build-training-operator.sh).

Each `start_*` returns once the controller is ready (its `/readyz` answers 200), watching one
namespace, with the client rate and workers it was given; `stop` ends it. Both talk to the API
server with the admin kubeconfig, so the audit log tells them apart by user agent only:
`torchrun-controller` (controller/rest's), and `training-operator/...` (client-go's default, after
the binary's name).

training-operator out of cluster (what its v1.9.3 source requires, cmd/training-operator.v1 and
pkg/cert): its certificate rotator (open-policy-agent/cert-controller) works on the Secret
`training-operator-webhook-cert` in namespace `kubeflow` (`MY_POD_NAMESPACE` overrides it) and
only updates it, so the Secret must exist; it injects its CA into the ValidatingWebhookConfiguration
`validator.training-operator.kubeflow.org` (a name fixed in main.go; a missing one is logged and
skipped), which we create without webhooks so the API server never calls it; and it waits (a
backoff of about 17 minutes in all) for `tls.crt` to appear in `/tmp/k8s-webhook-server/serving-certs`
(a constant of pkg/cert: in a cluster the Secret is mounted there), which we copy from the Secret
once it has been rotated. Its controllers start only after that.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from burst import IMAGE, wait_http_ok
from common import REPO, free_port, install_crds, metric_sums

from controller.rest import ApiError, Resource, RESTClient
from controller.rest.resources import NAMESPACES

TRAINING_OPERATOR_USER_AGENT = "training-operator/"
TORCHRUN_USER_AGENT = "torchrun-controller"
TO_NAMESPACE = "kubeflow"
TO_SECRET = "training-operator-webhook-cert"
TO_WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
TO_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
SECRETS = Resource("", "v1", "secrets", "Secret")
PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
VALIDATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s; returns once the process is gone."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_torchrun_controller(
    kubeconfig: Path,
    ns: str,
    *,
    threadiness: int,
    qps: int,
    burst: int,
    extra: tuple[str, ...] = (),
    log: Path | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """This checkout's controller for namespace `ns`, ready; the process and its metrics port. Its
    output goes to `log` when given (else to this process's)."""
    metrics, health = free_port(), free_port()
    command = torchrun_controller_command(
        kubeconfig, ns, threadiness=threadiness, qps=qps, burst=burst, metrics=metrics, health=health
    )
    with log.open("ab") if log else contextlib.nullcontext() as out:
        proc = subprocess.Popen([*command, *extra], cwd=REPO, stdout=out, stderr=out)
    wait_http_ok(f"http://127.0.0.1:{health}/readyz")
    return proc, metrics


def torchrun_controller_command(
    kubeconfig: Path, ns: str, *, threadiness: int, qps: int, burst: int, metrics: int = 0, health: int = 0
) -> list[str]:
    """The command line of this checkout's controller for namespace `ns` (run it from REPO), log
    level warning (a later `--log-level` wins); port 0: any free one."""
    command = [sys.executable, "-m", "controller.cmd.main", "--kubeconfig", str(kubeconfig)]
    command += ["--namespace", ns, "--threadiness", str(threadiness)]
    command += ["--kube-api-qps", str(qps), "--kube-api-burst", str(burst)]
    command += ["--metrics-addr", f"127.0.0.1:{metrics}", "--health-addr", f"127.0.0.1:{health}"]
    return [*command, "--log-level", "warning"]


def build_training_operator() -> Path:
    """The directory of the built training-operator (binary `training-operator`, CRDs in crds/)."""
    script = REPO / "hack" / "testbed" / "build-training-operator.sh"
    return Path(subprocess.run([str(script)], check=True, capture_output=True, text=True).stdout.strip())


def prepare_training_operator(kubeconfig: Path, rest: RESTClient, home: Path) -> None:
    """What training-operator needs in the cluster before it starts: its CRDs (from its module),
    namespace `kubeflow`, the empty Secret its rotator fills, the webhook configuration without
    webhooks."""
    install_crds(kubeconfig, home / "crds")
    _create(rest, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TO_NAMESPACE}})
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": TO_SECRET}}
    _create(rest, SECRETS, secret, TO_NAMESPACE)
    vwc = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": TO_WEBHOOK_CONFIGURATION},
    }
    _create(rest, VALIDATING_WEBHOOKS, vwc)


def _create(rest: RESTClient, resource: Resource, body: dict[str, Any], ns: str | None = None) -> None:
    try:
        rest.create(resource, body, ns)
    except ApiError as exc:
        if not exc.already_exists:
            raise


def start_training_operator(
    kubeconfig: Path, rest: RESTClient, home: Path, ns: str, *, threads: int, qps: int, burst: int, log: Path
) -> subprocess.Popen[bytes]:
    """training-operator (PyTorchJob only) for namespace `ns`, ready: its certificate copied from
    the Secret into its certificate directory, its controllers set up."""
    shutil.rmtree(TO_CERT_DIR, ignore_errors=True)  # a previous run's certificate is not this Secret's
    health = free_port()
    command = [str(home / "training-operator"), "--namespace", ns, "--enable-scheme", "pytorchjob"]
    command += ["--controller-threads", str(threads)]
    command += ["--kube-api-qps", str(qps), "--kube-api-burst", str(burst)]
    command += ["--metrics-bind-address", "0", "--health-probe-bind-address", f"127.0.0.1:{health}"]
    command += ["--webhook-server-port", str(free_port()), "--zap-log-level", "info"]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("MY_POD_NAMESPACE", None)
    with log.open("ab") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    _copy_rotated_certificate(rest, proc)
    wait_http_ok(f"http://127.0.0.1:{health}/readyz", timeout=180)
    return proc


def _copy_rotated_certificate(rest: RESTClient, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Wait for the rotator to fill the Secret, then write its tls.crt and tls.key where the
    rotator and the webhook server read them (a kubelet would mount the Secret there)."""
    deadline = time.monotonic() + timeout
    while True:
        data = rest.get(SECRETS, TO_SECRET, TO_NAMESPACE).get("data") or {}
        if "tls.crt" in data and "tls.key" in data:
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("training-operator never filled its webhook Secret (see its log)")
        time.sleep(0.3)
    TO_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for key in ("tls.key", "tls.crt"):  # tls.crt last: its presence is what the rotator waits for
        (TO_CERT_DIR / key).write_bytes(base64.b64decode(data[key]))


def pytorchjob(name: str) -> dict[str, Any]:
    """The two-node PyTorchJob of the burst: 1 master + 1 worker, the same image and command."""

    def replica() -> dict[str, Any]:
        container = {"name": "pytorch", "image": IMAGE, "command": ["python", "train.py"]}
        return {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


def pass_profile(metrics_port: int, jobs: int) -> dict[str, float]:
    """How our controller spent its TorchrunJob passes so far, from its /metrics: passes per job,
    mean pass and queue-wait milliseconds, and seconds its client waited for its QPS limit."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    ours = metric_sums(text, 'controller="torchrunjob"')
    queue = metric_sums(text, 'name="torchrunjob"')
    limiter = metric_sums(text, "verb=")

    def mean_ms(sums: dict[str, float], metric: str) -> float:
        return 1000 * sums.get(f"{metric}_sum", 0.0) / max(1.0, sums.get(f"{metric}_count", 0.0))

    return {
        "passes_per_job": ours.get("controller_reconcile_total", 0.0) / jobs,
        "pass_ms": mean_ms(ours, "controller_reconcile_duration_seconds"),
        "queue_ms": mean_ms(queue, "workqueue_queue_duration_seconds"),
        "limiter_s": limiter.get("rest_client_rate_limiter_duration_seconds_sum", 0.0),
    }
