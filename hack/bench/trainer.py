"""Kubeflow Trainer v2 (TrainJob) and the JobSet controller it drives, run as processes on the
benchmark's control plane (hack/testbed/build-trainer.sh builds both from the Go module proxy).

A TrainJob becomes a JobSet (Trainer's controller), the JobSet an Indexed Job per replicated job
and a headless Service (JobSet's controller), the Job its pods (kube-controller-manager's Job
controller): the Indexed-Job design with one more layer.

Out of cluster (what their source at v2.3.0 / v0.12.0 takes, cmd/trainer-controller-manager and
JobSet's main.go): each reads a configuration file (`--config`) in which we turn their own
certificate management off (`certManagement.enable` / `internalCertManagement.enable`), leader
election off, metrics off (bind address `0`), and serve the webhooks on 127.0.0.1 at a free port.
Both then serve `tls.crt` / `tls.key` from a certificate directory: JobSet's is
`webhook.certDir`; Trainer's configuration has no such field, so its server takes
controller-runtime's default, `$TMPDIR/k8s-webhook-server/serving-certs`, and we give it a
`TMPDIR` of its own. One self-signed certificate for IP 127.0.0.1 serves both. The webhook
configurations are each module's own (its webhook kustomization: the configurations and their
patches, e.g. JobSet's pod webhooks only for pods labelled with a JobSet), with every
`clientConfig.service` replaced by `url: https://127.0.0.1:<port><path>` and our `caBundle`;
they are registered once both processes are ready and removed before the processes stop, so no
other subject's requests ever wait for them (their failure policy is Fail).

Both talk to the API server with the admin kubeconfig; the audit log tells them apart by user
agent: `trainer-controller-manager/...` (client-go's default: the binary's name) and `jobset/...`
(JobSet sets its own, `jobset/<version>`). Trainer's TrainJob workers are the bench's
`--threads` (`controller.groupKindConcurrency`); JobSet v0.12.0 has no such setting, so its
controller runs controller-runtime's default, one worker. Both run at the bench's client QPS and
burst (Trainer's `clientConnection`, JobSet's `--kube-api-qps` / `--kube-api-burst`).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import yaml
from burst import IMAGE, wait_http_ok
from common import REPO, free_port, install_crds, kubectl
from controllers import stop

from controller.progress.tls import self_signed
from controller.rest import ApiError, Resource, RESTClient

TRAINER_USER_AGENT = "trainer-controller-manager/"
JOBSET_USER_AGENT = "jobset/"
TORCH_RUNTIME = "torch-distributed"
TRAINJOBS = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")
CLUSTER_TRAINING_RUNTIMES = Resource(
    "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "ClusterTrainingRuntime", namespaced=False
)
_ADMISSION = "admissionregistration.k8s.io"
WEBHOOK_CONFIGURATIONS = {
    kind: Resource(_ADMISSION, "v1", kind.lower() + "s", kind, namespaced=False)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
}
# kubebuilder's scaffold names, which a release prefixes with the project's name (JobSet's
# config/default: `namePrefix: jobset-`)
_SCAFFOLD_NAMES = frozenset({"mutating-webhook-configuration", "validating-webhook-configuration"})


def build_trainer() -> Path:
    """The directory hack/testbed/build-trainer.sh built (binaries, crds/, runtimes/, webhooks/)."""
    script = REPO / "hack" / "testbed" / "build-trainer.sh"
    return Path(subprocess.run([str(script)], check=True, capture_output=True, text=True).stdout.strip())


def prepare_trainer(kubeconfig: Path, rest: RESTClient, home: Path) -> None:
    """What Trainer needs in the cluster before it starts: its CRDs and JobSet's, and the torch
    ClusterTrainingRuntime from its manifests."""
    install_crds(kubeconfig, home / "crds")
    runtime = yaml.safe_load((home / "runtimes" / "torch_distributed.yaml").read_text())
    try:
        rest.create(CLUSTER_TRAINING_RUNTIMES, runtime)
    except ApiError as exc:
        if not exc.already_exists:
            raise


def trainjob(name: str) -> dict[str, Any]:
    """The two-node TrainJob of the burst: the torch runtime, the same image and command."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": TORCH_RUNTIME},
            "trainer": {"numNodes": 2, "image": IMAGE, "command": ["python", "train.py"]},
        },
    }


def webhook_configurations(
    kustomization_dir: Path, component: str, url: str, ca: bytes
) -> list[dict[str, Any]]:
    """The webhook configurations of a webhook kustomization (its resources with its JSON
    patches applied by target kind and name), each webhook calling `url` + its path, trusting
    `ca`."""
    kustomization = yaml.safe_load((kustomization_dir / "kustomization.yaml").read_text())
    objects = [
        obj
        for resource in kustomization["resources"]
        for obj in yaml.safe_load_all((kustomization_dir / resource).read_text())
        if obj and obj.get("kind") in WEBHOOK_CONFIGURATIONS
    ]
    for patch in kustomization.get("patches") or []:
        target = patch["target"]
        ops = yaml.safe_load((kustomization_dir / patch["path"]).read_text())
        for i, obj in enumerate(objects):
            if (
                obj["kind"] == target["kind"]
                and target.get("name", obj["metadata"]["name"]) == obj["metadata"]["name"]
            ):
                objects[i] = jsonpatch.apply_patch(obj, ops)
    out = []
    for original in objects:
        obj = copy.deepcopy(original)
        meta = obj["metadata"]
        if meta["name"] in _SCAFFOLD_NAMES:
            meta["name"] = f"{component}-{meta['name']}"
        for hook in obj["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": url + path, "caBundle": base64.b64encode(ca).decode()}
        out.append(obj)
    return out


@dataclass
class TrainerPeer:
    """Trainer and JobSet running for one burst, their webhooks registered."""

    rest: RESTClient
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # by program
    webhooks: list[dict[str, Any]] = field(default_factory=list)

    def stop(self) -> None:
        """Remove the webhook configurations first (nothing may call a stopped server), then
        stop both processes."""
        for obj in self.webhooks:
            with contextlib.suppress(ApiError):
                self.rest.delete(WEBHOOK_CONFIGURATIONS[obj["kind"]], obj["metadata"]["name"])
        for proc in self.processes.values():
            stop(proc)


def _write_certificate(directory: Path, cert: bytes, key: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.key").touch(mode=0o600)
    (directory / "tls.key").write_bytes(key)
    (directory / "tls.crt").write_bytes(cert)


def _config(work: Path, name: str, body: dict[str, Any]) -> Path:
    path = work / f"{name}.yaml"
    path.write_text(json.dumps(body, indent=1))  # JSON is YAML
    return path


def start_trainer(
    kubeconfig: Path,
    rest: RESTClient,
    home: Path,
    work: Path,
    *,
    threads: int,
    qps: int,
    burst: int,
    log: Path,
) -> TrainerPeer:
    """JobSet's and Trainer's controller managers, ready, their webhooks registered and in force.
    Their configuration, certificates and temporary files go under `work`; their output to `log`."""
    work.mkdir(parents=True, exist_ok=True)
    cert, key = self_signed(days=1, subject="bench webhooks", ips=("127.0.0.1",))
    jobset_certs, trainer_tmp = work / "jobset-certs", work / "trainer-tmp"
    _write_certificate(jobset_certs, cert, key)
    _write_certificate(trainer_tmp / "k8s-webhook-server" / "serving-certs", cert, key)
    ports = {program: (free_port(), free_port()) for program in ("jobset", "trainer")}  # webhook, health
    jobset_config = _config(
        work,
        "jobset",
        {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "webhook": {"port": ports["jobset"][0], "host": "127.0.0.1", "certDir": str(jobset_certs)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['jobset'][1]}"},
            "metrics": {"bindAddress": "0"},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        },
    )
    trainer_config = _config(
        work,
        "trainer",
        {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "webhook": {"port": ports["trainer"][0], "host": "127.0.0.1"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['trainer'][1]}"},
            "metrics": {"bindAddress": "0"},
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
            "controller": {"groupKindConcurrency": {"TrainJob.trainer.kubeflow.org": threads}},
            "clientConnection": {"qps": qps, "burst": burst},
        },
    )
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    commands = {
        "trainer": [str(home / "trainer-controller-manager"), "--config", str(trainer_config)],
        # info-level logs like every other controller of the bench (JobSet defaults to zap's
        # development mode: debug level)
        "jobset": [
            *(str(home / "jobset"), "--config", str(jobset_config), "--zap-devel=false"),
            *("--kube-api-qps", str(qps), "--kube-api-burst", str(burst)),
        ],
    }
    peer = TrainerPeer(rest)
    try:
        with log.open("ab") as out:
            for program, command in commands.items():
                program_env = {**env, "TMPDIR": str(trainer_tmp)} if program == "trainer" else env
                peer.processes[program] = subprocess.Popen(
                    command, env=program_env, stdout=out, stderr=subprocess.STDOUT
                )
        for _, health in ports.values():
            wait_http_ok(f"http://127.0.0.1:{health}/readyz", timeout=180)
        for program, (webhook, _) in ports.items():
            url = f"https://127.0.0.1:{webhook}"
            for obj in webhook_configurations(home / "webhooks" / program, program, url, cert):
                rest.create(WEBHOOK_CONFIGURATIONS[obj["kind"]], obj)
                peer.webhooks.append(obj)
        _wait_webhooks_in_force(kubeconfig, rest)
    except BaseException:
        peer.stop()
        raise
    return peer


def _wait_webhooks_in_force(kubeconfig: Path, rest: RESTClient, timeout: float = 60) -> None:
    """Return once the API server calls Trainer's TrainJob validator (it refuses, on a server
    dry run, a TrainJob whose runtime does not exist); the configurations reach the API server
    through its own watch, a moment after their create."""
    probe = trainjob("webhook-probe")
    probe["spec"]["runtimeRef"]["name"] = "no-such-runtime"
    deadline = time.monotonic() + timeout
    while True:
        try:
            kubectl(
                kubeconfig, "create", "--dry-run=server", "-n", "default", "-f", "-", stdin=json.dumps(probe)
            )
        except RuntimeError as exc:
            if "validator.trainjob.trainer.kubeflow.org" in str(exc):
                return
        if time.monotonic() > deadline:
            raise TimeoutError("the API server never called Trainer's TrainJob validator")
        time.sleep(0.3)
