"""The progress reporter of every worker pod: a native sidecar with the file, the token, the
metrics port and, only when the queue allows stack dumps, SYS_PTRACE — never the training
container."""

from __future__ import annotations

from typing import Any

from jobspecs import env_of, job, queue, worker

from controller.torchrunjob.manifests.progress import ReporterSettings


def pod_of(manifest: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return spec


def sidecar(pod: dict[str, Any]) -> dict[str, Any]:
    (found,) = [c for c in pod["initContainers"] if c["name"] == "progress-reporter"]
    return dict(found)


def test_every_worker_pod_gets_the_reporter_as_a_native_sidecar() -> None:
    pod = pod_of(worker(job(workspace={"source": "none"}), queue(), sync_image="ctl:1"))
    reporter = sidecar(pod)
    assert pod["initContainers"][-1] is not None and pod["initContainers"][-1]["name"] == "progress-reporter"
    assert reporter["restartPolicy"] == "Always" and reporter["image"] == "ctl:1"
    assert reporter["command"] == ["python", "-m", "controller.progress.sidecar.reporter"]
    assert "shareProcessNamespace" not in pod  # only with stack dumps (below)
    env = {e["name"]: e["value"] for e in reporter["env"]}
    assert env["TORCHRUN_PROGRESS_FILE"] == "/var/run/torchrun-progress/progress.jsonl"
    assert "TORCHRUN_PROGRESS_URL" not in env and "TORCHRUN_PROGRESS_CA" not in env  # no endpoint: no pushes
    assert reporter["ports"] == [{"name": "progress", "containerPort": 9400, "protocol": "TCP"}]
    # the training container writes the file the sidecar reads
    assert env_of(worker(job(), queue()))["TORCHRUN_PROGRESS_FILE"] == env["TORCHRUN_PROGRESS_FILE"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert "readOnly" not in mounts["/var/run/torchrun-progress"]
    side_mounts = {m["mountPath"]: m for m in reporter["volumeMounts"]}
    assert side_mounts["/var/run/torchrun-progress"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["torchrun-progress-token"]["projected"]["defaultMode"] == 0o444
    (source,) = volumes["torchrun-progress-token"]["projected"]["sources"]
    assert source == {
        "serviceAccountToken": {"audience": "torchrun-controller", "expirationSeconds": 600, "path": "token"}
    }
    assert (
        env["TORCHRUN_PROGRESS_TOKEN_FILE"]
        == side_mounts["/var/run/secrets/torchrun-progress"]["mountPath"] + "/token"
    )


def test_the_endpoint_and_its_ca_reach_the_reporter() -> None:
    settings = ReporterSettings("https://ctl.example:9443/v1/progress", "-----BEGIN CERTIFICATE-----\n...")
    reporter = sidecar(pod_of(worker(job(), queue(), reporter=settings)))
    env = {e["name"]: e["value"] for e in reporter["env"]}
    assert env["TORCHRUN_PROGRESS_URL"] == settings.url and env["TORCHRUN_PROGRESS_CA"] == settings.ca


def test_only_the_sidecar_may_ptrace_and_only_when_the_queue_allows_stack_dumps() -> None:
    pod = pod_of(worker(job(), queue(debug={"stackDumps": True})))
    security = sidecar(pod)["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert pod["shareProcessNamespace"] is True  # py-spy in the sidecar sees the training processes
    assert security["allowPrivilegeEscalation"] is False
    trainer = pod["containers"][0].get("securityContext") or {}
    assert "capabilities" not in trainer or "SYS_PTRACE" not in str(trainer["capabilities"])
    for off in (queue(), queue(debug={}), queue(debug={"stackDumps": False})):  # off by default
        plain = pod_of(worker(job(), off))
        assert "shareProcessNamespace" not in plain  # the containers see only their own processes
        locked = sidecar(plain)["securityContext"]
        assert locked["capabilities"] == {"drop": ["ALL"]} and locked["runAsNonRoot"] is True
        assert locked["seccompProfile"] == {"type": "RuntimeDefault"}
        assert locked["allowPrivilegeEscalation"] is False
