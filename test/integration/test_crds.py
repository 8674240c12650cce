"""The CRDs against the real kube-apiserver: samples accepted, bad input rejected naming the field,
defaults visible on read-back and equal to the Python types' defaults, printer columns printed."""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from testbed import Cluster, condition, wait_until

from controller.api import TorchrunJob, TorchrunQueue, WorkspaceSource, to_json
from controller.cmd.main import App

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "config" / "samples").glob("*.yaml"))
CRD_NAMES = ("torchrunqueues.torchrun.ai", "torchrunjobs.torchrun.ai")


@pytest.fixture(scope="module")
def crds(cluster: Cluster) -> Cluster:
    """`kubectl apply -f crd/`, exactly as the README says, then wait until the API serves them."""
    cluster.kubectl("apply", "-f", str(REPO / "crd"))
    crd_refs = [f"crd/{name}" for name in CRD_NAMES]
    cluster.wait_established(*crd_refs)
    wait_until(
        lambda: cluster.kubectl("get", "tq,tj", "-A", check=False).returncode == 0,
        timeout=30,
        message="kubectl to discover tq and tj",
    )
    return cluster


@pytest.fixture
def samples(crds: Cluster, namespace: str) -> Iterator[list[dict[str, Any]]]:
    """Every sample, created in this test's namespace; the cluster-scoped queues are removed after."""
    docs = [doc for path in SAMPLES for doc in yaml.safe_load_all(path.read_text()) if doc]
    for path in SAMPLES:
        crds.apply(path.read_text(), namespace=namespace)
    yield docs
    queues = [d["metadata"]["name"] for d in docs if d["kind"] == "TorchrunQueue"]
    crds.kubectl("delete", "tq", *queues, "--wait=false", "--ignore-not-found", check=False)


def present_paths(value: Any, path: str = "") -> set[str]:
    """JSON paths holding a non-empty value (absent and empty mean the same to the types)."""
    if isinstance(value, dict):
        paths = {p for k, v in value.items() for p in present_paths(v, f"{path}.{k}")}
        return paths or ({path} if value else set())
    if isinstance(value, list):
        return {p for i, v in enumerate(value) for p in present_paths(v, f"{path}[{i}]")}
    return {path}


def read_back(cluster: Cluster, doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    resource = "tq" if doc["kind"] == "TorchrunQueue" else "tj"
    ns = [] if resource == "tq" else ["-n", namespace]
    return cluster.get(resource, doc["metadata"]["name"], *ns)


def test_every_sample_is_accepted_and_reads_back_as_the_types_expect(
    crds: Cluster, namespace: str, samples: list[dict[str, Any]]
) -> None:
    assert len(samples) >= 10
    for doc in samples:
        stored = read_back(crds, doc, namespace)
        kind = TorchrunQueue if doc["kind"] == "TorchrunQueue" else TorchrunJob
        name = doc["metadata"]["name"]
        # the server's defaults are exactly the Python defaults: same values, no extra fields
        assert kind.from_json(stored).spec == kind.from_json(doc).spec, name
        assert present_paths(stored["spec"]) == present_paths(to_json(kind.from_json(doc).spec)), name


def test_defaults_appear_on_objects_read_back(
    crds: Cluster, namespace: str, samples: list[dict[str, Any]]
) -> None:
    queue = crds.get("tq", "basic")["spec"]
    assert queue["nodeResources"]["gpuResourceName"] == "nvidia.com/gpu"
    # runAsNonRoot is the default filled in beside the sample's user (its image runs as root)
    assert queue["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}
    assert queue["storage"]["workspace"] == {
        "enabled": True,
        "sizePerGPU": "10Gi",
        "accessModes": ["ReadWriteMany"],
    }
    assert queue["storage"]["checkpoints"]["enabled"] is False
    assert queue["storage"]["checkpoints"]["mountPath"] == "/checkpoints"
    assert queue["storage"]["shmSizePerGPU"] == "2Gi"
    assert queue["scheduling"] == {"scheduler": "default"}

    prod = crds.get("tq", "prod")["spec"]
    assert prod["securityContext"]["runAsNonRoot"] is True  # defaulted inside a user-written object
    assert prod["securityContext"]["runAsUser"] == 1000
    assert prod["storage"]["datasets"] == {
        "claimName": "datasets",
        "mountPath": "/datasets",
        "readOnly": True,
    }
    assert prod["quota"]["cpu"] == {"quota": 768, "overQuotaWeight": 1}

    job = crds.get("tj", "mnist", "-n", namespace)["spec"]
    assert job["distributed"] == {
        "backend": "nccl",
        "rdzvBackend": "c10d",
        "managedEtcd": False,
        "rdzvPort": 29400,
        "maxRestarts": 0,
    }
    assert job["workspace"] == {"source": "upload", "mountPath": "/app", "generation": 0}
    assert job["failurePolicy"] == {
        "maxRestarts": 0,
        "backoffLimitPerNode": 0,
        "maxRetriableFailures": 10,
        "restartMode": "Recreate",
    }
    assert job["suspend"] is False


def test_legacy_zip_source_is_accepted_and_read_as_upload(crds: Cluster, namespace: str) -> None:
    crds.apply(job_manifest("legacy-zip", workspace={"source": "zip"}), namespace=namespace)
    stored = crds.get("tj", "legacy-zip", "-n", namespace)
    assert stored["spec"]["workspace"]["source"] == "zip"
    assert TorchrunJob.from_json(stored).spec.workspace.source is WorkspaceSource.UPLOAD


def test_the_seeds_forms_are_accepted_as_written(crds: Cluster, namespace: str) -> None:
    """etcd-v2 without an endpoint (the seed README's jobs) and `volumes.workspace` (its changes
    document) are accepted; the seed form is stored as written and read as `workspace`."""
    crds.apply(
        job_manifest("seed-etcd", distributed={"backend": "nccl", "rdzvBackend": "etcd-v2"}), namespace
    )
    etcd = TorchrunJob.from_json(crds.get("tj", "seed-etcd", "-n", namespace))
    assert etcd.spec.distributed.runs_managed_etcd
    crds.apply(job_manifest("seed-zip", volumes={"workspace": {"enabled": True, "source": "zip"}}), namespace)
    stored = crds.get("tj", "seed-zip", "-n", namespace)
    assert stored["spec"]["volumes"] == {"workspace": {"enabled": True, "source": "zip"}}
    assert "workspace" not in stored["spec"]  # no server default: CEL can tell the spellings apart
    assert TorchrunJob.from_json(stored).spec.workspace.source is WorkspaceSource.UPLOAD


def table(text: str) -> list[dict[str, str]]:
    """kubectl's table output as rows of {HEADER: cell}, cut at the header's column starts (cells
    such as COMMAND may hold spaces; kubectl aligns every column under its header)."""
    header, *lines = text.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [dict(zip(header.split(), (line[a:b].strip() for a, b in bounds), strict=True)) for line in lines]


def rows(cluster: Cluster, *args: str) -> dict[str, dict[str, str]]:
    """`kubectl get ARGS -o wide`, rows by NAME."""
    return {r["NAME"]: r for r in table(cluster.kubectl("get", *args, "-o", "wide").stdout)}


def cell(value: Any) -> str:
    """How kubectl prints a printer column's value (an absent field prints as an empty cell)."""
    return "" if value is None else str(value)


def queue_on(cluster: Cluster, outcome: str) -> str:
    name = f"cols-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        queue_manifest(
            name,
            nodeResources={"gpus": 8},
            podAnnotations={"kwok.torchrun.ai/outcome": outcome, "kwok.torchrun.ai/duration": "1s"},
        )
    )
    return name


def test_printer_columns_show_what_the_controller_wrote(
    crds: Cluster, namespace: str, start_controller: Callable[..., App]
) -> None:
    """`kubectl get tj,tq` on objects the controller produced, not on status written by hand: a
    2-node job run to Succeeded and a 1-node job that failed after its one whole-job restart.
    Every printer column (default and -o wide) shows the field it names in the objects' real
    status and spec, and those are the values the two runs imply."""
    ok, failing = queue_on(crds, "succeed"), queue_on(crds, "fail")
    try:
        start_controller()
        for name, queue, spec in (
            ("done", ok, {"numNodes": 2}),
            ("broke", failing, {"numNodes": 1, "failurePolicy": {"maxRestarts": 1}}),
        ):
            crds.apply(job_manifest(name, jobQueue=queue, workspace={"source": "none"}, **spec), namespace)

        def finished(name: str, phase: str) -> dict[str, Any] | None:
            obj = crds.get("tj", name, "-n", namespace)
            return obj if obj.get("status", {}).get("phase") == phase else None

        wait_until(lambda: finished("done", "Succeeded"), 90, message="done Succeeded")
        wait_until(lambda: finished("broke", "Failed"), 90, message="broke Failed")

        def counted(name: str, phase: str) -> dict[str, Any] | None:
            obj = crds.get("tq", name)
            jobs = obj.get("status", {}).get("jobs", {})
            return obj if (jobs.get("total"), jobs.get(phase)) == (1, 1) else None

        wait_until(lambda: counted(ok, "succeeded"), 30, message="the queue counting its job")
        wait_until(lambda: counted(failing, "failed"), 30, message="the queue counting its job")

        plain = crds.kubectl("get", "tj", "-n", namespace).stdout
        assert plain.splitlines()[0].split() == [
            "NAME", "QUEUE", "NODES", "GPUS", "PHASE", "RESTARTS", "PROGRESS", "GOODPUT", "AGE"
        ]  # fmt: skip
        plain = crds.kubectl("get", "tq", ok).stdout
        assert plain.splitlines()[0].split() == ["NAME", "GPUS/NODE", "SCHEDULER", "READY", "JOBS", "AGE"]

        # the table and the objects, read back to back (finished jobs and counted queues are stable)
        job_rows = rows(crds, "tj", "-n", namespace)
        jobs = {o["metadata"]["name"]: o for o in crds.get("tj", "-n", namespace)["items"]}
        queue_rows = rows(crds, "tq", ok, failing)
        queues = {o["metadata"]["name"]: o for o in (crds.get("tq", ok), crds.get("tq", failing))}

        assert set(job_rows) == set(jobs) == {"done", "broke"}
        for name, obj in jobs.items():
            status = obj["status"]
            assert job_rows[name] == {
                "NAME": name,
                "QUEUE": obj["spec"]["jobQueue"],
                "NODES": cell(status.get("nodes")),
                "GPUS": cell(status.get("gpus")),
                "PHASE": cell(status.get("phase")),
                "RESTARTS": cell(status.get("restarts")),
                "PROGRESS": cell((status.get("progress") or {}).get("summary")),  # these never report
                "GOODPUT": cell((status.get("goodput") or {}).get("summary")),  # so they show none
                "AGE": job_rows[name]["AGE"],
                "READY": cell(status.get("workers", {}).get("ready")),
                "COMMAND": obj["spec"]["command"],
            }, name
            assert re.fullmatch(r"\d+s", job_rows[name]["AGE"]), job_rows[name]
        for name, obj in queues.items():
            ready = (condition(obj, "Ready") or {}).get("status")
            assert queue_rows[name] == {
                "NAME": name,
                "GPUS/NODE": cell(obj["spec"]["nodeResources"]["gpus"]),
                "SCHEDULER": obj["spec"]["scheduling"]["scheduler"],
                "READY": ready,
                "JOBS": cell(obj["status"]["jobs"].get("total")),
                "AGE": queue_rows[name]["AGE"],
                "RUNNING": cell(obj["status"]["jobs"].get("running")),
                "PENDING": cell(obj["status"]["jobs"].get("pending")),
                "IMAGE": obj["spec"]["image"],
            }, name

        # and what the two runs imply, so a column reading a field the controller never fills fails
        picked = ("QUEUE", "NODES", "GPUS", "PHASE", "RESTARTS")
        assert [job_rows["done"][k] for k in picked] == [ok, "2", "16", "Succeeded", "0"]
        assert [job_rows["broke"][k] for k in picked] == [failing, "1", "8", "Failed", "1"]
        picked = ("GPUS/NODE", "SCHEDULER", "READY", "JOBS", "RUNNING", "PENDING")
        assert [queue_rows[ok][k] for k in picked] == ["8", "default", "True", "1", "0", "0"]
        assert [queue_rows[failing][k] for k in picked] == ["8", "default", "True", "1", "0", "0"]

        # the `torchrun` category lists both kinds
        category = crds.kubectl("get", "torchrun", "-n", namespace).stdout
        assert "torchrunjob.torchrun.ai/done" in category and f"torchrunqueue.torchrun.ai/{ok}" in category
    finally:
        crds.kubectl("delete", "tq", ok, failing, "--wait=false", "--ignore-not-found", check=False)


def test_status_is_a_subresource(crds: Cluster, namespace: str) -> None:
    manifest = job_manifest("status-ignored")
    manifest["status"] = {"phase": "Succeeded"}
    crds.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    # with the status subresource, status sent to the main resource is dropped
    assert "status" not in crds.get("tj", "status-ignored", "-n", namespace)


# --- invalid manifests: each rejected at admission with a message naming the field ---------------


def job_manifest(name: str = "bad-job", **spec: Any) -> dict[str, Any]:
    base = {"jobQueue": "dev", "numNodes": 2, "command": "python train.py"}
    return {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunJob",
        "metadata": {"name": name},
        "spec": merge(base, spec),
    }


def queue_manifest(name: str | None = None, **spec: Any) -> dict[str, Any]:
    base = {"nodeResources": {"gpus": 8}, "image": "pytorch/pytorch"}
    return {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunQueue",
        "metadata": {"name": name or f"bad-queue-{uuid.uuid4().hex[:6]}"},
        "spec": merge(base, spec),
    }


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A deep merge where None deletes the key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


ELASTIC = {"minNodes": 1, "maxNodes": 4}
ENV_BOTH = {"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
INVALID: list[tuple[str, dict[str, Any], list[str]]] = [
    # TorchrunJob: size
    (
        "job-no-size",
        job_manifest(numNodes=None),
        ["spec.numNodes: Required value: one of numNodes or numGPUs is required"],
    ),
    (
        "job-both-sizes",
        job_manifest(numGPUs=16),
        ["spec.numGPUs: Forbidden: numNodes and numGPUs are mutually exclusive"],
    ),
    ("job-zero-nodes", job_manifest(numNodes=0), ["spec.numNodes", "greater than or equal to 1"]),
    ("job-too-many-nodes", job_manifest(numNodes=5000), ["spec.numNodes", "less than or equal to 1024"]),
    ("job-zero-gpus", job_manifest(numNodes=None, numGPUs=0), ["spec.numGPUs", "greater than or equal to 1"]),
    # TorchrunJob: required and malformed fields
    ("job-no-queue", job_manifest(jobQueue=None), ["spec.jobQueue: Required value"]),
    ("job-bad-queue-name", job_manifest(jobQueue="My_Queue"), ["spec.jobQueue", "should match"]),
    ("job-no-command", job_manifest(command=None), ["spec.command: Required value"]),
    ("job-empty-command", job_manifest(command=""), ["spec.command", "at least 1 chars long"]),
    ("job-typo-field", job_manifest(numNode=2), ['unknown field "spec.numNode"']),
    ("job-name-too-long", job_manifest("x" * 53), ["metadata.name must be a DNS-1035 label", "at most 52"]),
    ("job-name-digit-first", job_manifest("1st-run"), ["metadata.name must be a DNS-1035 label"]),
    # TorchrunJob: distributed
    (
        "job-bad-backend",
        job_manifest(distributed={"backend": "mpi"}),
        ['spec.distributed.backend: Unsupported value: "mpi"'],
    ),
    (
        "job-managed-etcd-with-c10d",
        job_manifest(distributed={"managedEtcd": True}),
        ["spec.distributed.rdzvBackend: Forbidden: rdzvEndpoint and managedEtcd are only for rdzvBackend"],
    ),
    (
        "job-etcd-both",
        job_manifest(
            distributed={"rdzvBackend": "etcd-v2", "rdzvEndpoint": "etcd:2379", "managedEtcd": True}
        ),
        ["spec.distributed.managedEtcd: Forbidden: rdzvEndpoint and managedEtcd are mutually exclusive"],
    ),
    (
        "job-c10d-endpoint",
        job_manifest(distributed={"rdzvEndpoint": "etcd:2379"}),
        ["spec.distributed.rdzvBackend: Forbidden: rdzvEndpoint and managedEtcd are only for rdzvBackend"],
    ),
    (
        "job-endpoint-no-port",
        job_manifest(distributed={"rdzvBackend": "etcd-v2", "rdzvEndpoint": "etcd"}),
        ["spec.distributed.rdzvEndpoint", "should match"],
    ),
    (
        "job-bad-port",
        job_manifest(distributed={"rdzvPort": 70000}),
        ["spec.distributed.rdzvPort", "less than or equal to 65535"],
    ),
    # TorchrunJob: elastic
    (
        "job-elastic-inverted",
        job_manifest(numNodes=None, elastic={"minNodes": 4, "maxNodes": 2}),
        ["spec.elastic.minNodes", "minNodes must be less than or equal to maxNodes"],
    ),
    (
        "job-elastic-gpus",
        job_manifest(numNodes=None, numGPUs=16, elastic=ELASTIC),
        ["spec.numGPUs: Forbidden: elastic jobs are sized in nodes"],
    ),
    (
        "job-elastic-outside",
        job_manifest(numNodes=6, elastic=ELASTIC),
        ["spec.numNodes", "numNodes must be within elastic.minNodes..elastic.maxNodes"],
    ),
    ("job-elastic-no-max", job_manifest(elastic={"minNodes": 1}), ["spec.elastic.maxNodes: Required value"]),
    # TorchrunJob: workspace
    (
        "job-git-missing",
        job_manifest(workspace={"source": "git"}),
        ["spec.workspace.git: Required value: source git needs workspace.git"],
    ),
    (
        "job-git-stray",
        job_manifest(workspace={"git": {"url": "https://github.com/x/y.git"}}),
        ["spec.workspace.git: Forbidden: workspace.git is only allowed with source git"],
    ),
    (
        "job-s3-with-pvc",
        job_manifest(
            workspace={"source": "s3", "s3": {"uri": "s3://bucket/code.tar.gz"}, "pvc": {"claimName": "c"}}
        ),
        ["spec.workspace.pvc: Forbidden: workspace.pvc is only allowed with source pvc"],
    ),
    ("job-pvc-missing", job_manifest(workspace={"source": "pvc"}), ["spec.workspace.pvc: Required value"]),
    (
        "job-s3-missing",
        job_manifest(workspace={"source": "s3"}),
        ["spec.workspace.s3: Required value: source s3 needs workspace.s3"],
    ),
    (
        "job-s3-stray",
        job_manifest(workspace={"s3": {"uri": "s3://bucket/code.tar.gz"}}),
        ["spec.workspace.s3: Forbidden: workspace.s3 is only allowed with source s3"],
    ),
    (
        "job-bad-source",
        job_manifest(workspace={"source": "ftp"}),
        ['spec.workspace.source: Unsupported value: "ftp"'],
    ),
    (
        "job-bad-git-url",
        job_manifest(workspace={"source": "git", "git": {"url": "not a url"}}),
        ["spec.workspace.git.url", "should match"],
    ),
    (
        "job-bad-s3-uri",
        job_manifest(workspace={"source": "s3", "s3": {"uri": "https://bucket/x"}}),
        ["spec.workspace.s3.uri", "should match"],
    ),
    (
        "job-pvc-escape",
        job_manifest(workspace={"source": "pvc", "pvc": {"claimName": "c", "subPath": "code/../../etc"}}),
        ["spec.workspace.pvc.subPath", "subPath must be a relative path without '..'"],
    ),
    (
        "job-relative-mount",
        job_manifest(workspace={"mountPath": "app"}),
        ["spec.workspace.mountPath", "should match"],
    ),
    (
        "job-seed-and-new-workspace",
        job_manifest(workspace={"source": "none"}, volumes={"workspace": {"enabled": True, "source": "zip"}}),
        ["spec.volumes.workspace: Forbidden: volumes.workspace is the seed's deprecated spelling"],
    ),
    (
        "job-seed-workspace-git",
        job_manifest(volumes={"workspace": {"source": "git"}}),
        ["spec.volumes.workspace.source", "git, s3 and pvc need their settings: write spec.workspace"],
    ),
    (
        "job-seed-workspace-disabled-zip",
        job_manifest(volumes={"workspace": {"enabled": False, "source": "zip"}}),
        ["spec.volumes.workspace.source", "enabled: false means no workspace"],
    ),
    # TorchrunJob: lifecycle and failure policy
    (
        "job-negative-ttl",
        job_manifest(ttlSecondsAfterFinished=-1),
        ["spec.ttlSecondsAfterFinished", "greater than or equal to 0"],
    ),
    (
        "job-zero-deadline",
        job_manifest(activeDeadlineSeconds=0),
        ["spec.activeDeadlineSeconds", "greater than or equal to 1"],
    ),
    (
        "job-exit-code-both",
        job_manifest(failurePolicy={"permanentExitCodes": [1, 2], "retriableExitCodes": [2]}),
        ["spec.failurePolicy.retriableExitCodes", "an exit code cannot be both"],
    ),
    (
        "job-exit-code-zero",
        job_manifest(failurePolicy={"permanentExitCodes": [0]}),
        ["spec.failurePolicy.permanentExitCodes[0]", "greater than or equal to 1"],
    ),
    (
        "job-exit-code-dup",
        job_manifest(failurePolicy={"retriableExitCodes": [3, 3]}),
        ["spec.failurePolicy.retriableExitCodes[1]: Duplicate value: 3"],
    ),
    (
        "job-negative-restarts",
        job_manifest(failurePolicy={"maxRestarts": -1}),
        ["spec.failurePolicy.maxRestarts"],
    ),
    # TorchrunJob: overrides
    (
        "job-env-both",
        job_manifest(overrides={"env": [ENV_BOTH]}),
        ["spec.overrides.env[0]: Forbidden: value and valueFrom are mutually exclusive"],
    ),
    (
        "job-env-dup",
        job_manifest(overrides={"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}),
        ["spec.overrides.env[1]: Duplicate value"],
    ),
    (
        "job-toleration-exists-value",
        job_manifest(overrides={"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
        ["spec.overrides.tolerations[0].value: Forbidden: value must be empty when operator is Exists"],
    ),
    (
        "job-toleration-seconds",
        job_manifest(
            overrides={"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 30}]}
        ),
        ["spec.overrides.tolerations[0].tolerationSeconds: Forbidden: tolerationSeconds is only allowed"],
    ),
    (
        "job-override-empty-image",
        job_manifest(overrides={"image": ""}),
        ["spec.overrides.image", "at least 1 chars long"],
    ),
    # TorchrunQueue
    ("queue-no-image", queue_manifest(image=None), ["spec.image: Required value"]),
    ("queue-no-node-resources", queue_manifest(nodeResources=None), ["spec.nodeResources: Required value"]),
    (
        "queue-negative-gpus",
        queue_manifest(nodeResources={"gpus": -1}),
        ["spec.nodeResources.gpus", "greater than or equal to 0"],
    ),
    (
        "queue-bad-memory",
        queue_manifest(nodeResources={"memory": "lots"}),
        ["spec.nodeResources.memory", "should match"],
    ),
    (
        "queue-negative-cpus",
        queue_manifest(nodeResources={"cpus": "-4"}),
        ["spec.nodeResources.cpus", "should match"],
    ),
    (
        "queue-bad-gpu-resource",
        queue_manifest(nodeResources={"gpuResourceName": "gpu"}),
        ["spec.nodeResources.gpuResourceName"],
    ),
    (
        "queue-bad-scheduler",
        queue_manifest(scheduling={"scheduler": "slurm"}),
        ['spec.scheduling.scheduler: Unsupported value: "slurm"'],
    ),
    (
        "queue-kai-without-kai",
        queue_manifest(kaiQueue="team-a"),
        ["spec.kaiQueue: Forbidden: kaiQueue is only allowed with scheduling.scheduler kai-scheduler"],
    ),
    (
        "queue-parent-without-kai",
        queue_manifest(scheduling={"scheduler": "kueue"}, parentKaiQueue="root"),
        ["spec.parentKaiQueue: Forbidden"],
    ),
    (
        "queue-quota-without-kai",
        queue_manifest(quota={"gpu": {"quota": 8}}),
        ["spec.quota: Forbidden: quota is only allowed with scheduling.scheduler kai-scheduler"],
    ),
    (
        "queue-kueue-without-kueue",
        queue_manifest(scheduling={"scheduler": "kai-scheduler"}, kueueLocalQueue="lq"),
        ["spec.kueueLocalQueue: Forbidden: kueueLocalQueue is only allowed with scheduling.scheduler kueue"],
    ),
    (
        "queue-kueue-topology-without-kueue",
        queue_manifest(kueueTopology={"required": "topology.kubernetes.io/zone"}),
        ["spec.kueueTopology: Forbidden: kueueTopology is only allowed with scheduling.scheduler kueue"],
    ),
    (
        "queue-workload-slices-without-kueue",
        queue_manifest(kueueWorkloadSlices=True),
        [
            "spec.kueueWorkloadSlices: Forbidden",
            "kueueWorkloadSlices is only allowed with scheduling.scheduler kueue",
        ],
    ),
    (
        "queue-workload-slices-with-topology",
        queue_manifest(
            scheduling={"scheduler": "kueue"},
            kueueWorkloadSlices=True,
            kueueTopology={"required": "topology.kubernetes.io/zone"},
        ),
        ["spec.kueueWorkloadSlices: Forbidden: kueueWorkloadSlices cannot be combined with kueueTopology"],
    ),
    (
        "queue-kueue-topology-both-levels",
        queue_manifest(
            scheduling={"scheduler": "kueue"},
            kueueTopology={"required": "topology.kubernetes.io/zone", "preferred": "kubernetes.io/hostname"},
        ),
        ["spec.kueueTopology: Invalid value", "exactly one of required and preferred must be set"],
    ),
    (
        "queue-kueue-topology-no-level",
        queue_manifest(scheduling={"scheduler": "kueue"}, kueueTopology={}),
        ["spec.kueueTopology: Invalid value", "exactly one of required and preferred must be set"],
    ),
    (
        "queue-kueue-topology-not-a-label-key",
        queue_manifest(scheduling={"scheduler": "kueue"}, kueueTopology={"required": "zone/of/the/node"}),
        ["spec.kueueTopology.required: Invalid value"],
    ),
    (
        "queue-limit-below-quota",
        queue_manifest(scheduling={"scheduler": "kai-scheduler"}, quota={"gpu": {"quota": 16, "limit": "8"}}),
        ["spec.quota.gpu.limit", "limit must be greater than or equal to quota"],
    ),
    (
        "queue-cpu-limit-below-quota",
        queue_manifest(
            scheduling={"scheduler": "kai-scheduler"}, quota={"cpu": {"quota": 64, "limit": "32"}}
        ),
        ["spec.quota.cpu.limit", "limit must be greater than or equal to quota"],
    ),
    (
        "queue-memory-limit-below-quota",
        queue_manifest(
            scheduling={"scheduler": "kai-scheduler"}, quota={"memory": {"quota": "1Ti", "limit": "512Gi"}}
        ),
        ["spec.quota.memory.limit", "limit must be greater than or equal to quota"],
    ),
    (
        "queue-bad-override",
        queue_manifest(allowOverrides=["resources"]),
        ['spec.allowOverrides[0]: Unsupported value: "resources"'],
    ),
    (
        "queue-dup-override",
        queue_manifest(allowOverrides=["env", "env"]),
        ['spec.allowOverrides[1]: Duplicate value: "env"'],
    ),
    (
        "queue-no-access-modes",
        queue_manifest(storage={"workspace": {"accessModes": []}}),
        ["spec.storage.workspace.accessModes", "at least 1 items"],
    ),
    (
        "queue-bad-access-mode",
        queue_manifest(storage={"checkpoints": {"accessModes": ["ReadWriteSometimes"]}}),
        ['spec.storage.checkpoints.accessModes[0]: Unsupported value: "ReadWriteSometimes"'],
    ),
    (
        "queue-datasets-no-claim",
        queue_manifest(storage={"datasets": {"mountPath": "/data"}}),
        ["spec.storage.datasets.claimName: Required value"],
    ),
    (
        "queue-bad-size",
        queue_manifest(storage={"workspace": {"sizePerGPU": "10GB"}}),
        ["spec.storage.workspace.sizePerGPU", "should match"],
    ),
    (
        "queue-toleration-seconds",
        queue_manifest(
            scheduling={"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 30}]}
        ),
        ["spec.scheduling.tolerations[0].tolerationSeconds: Forbidden: tolerationSeconds is only allowed"],
    ),
    (
        "queue-env-both",
        queue_manifest(env=[ENV_BOTH]),
        ["spec.env[0]: Forbidden: value and valueFrom are mutually exclusive"],
    ),
    (
        "queue-toleration-exists-value",
        queue_manifest(scheduling={"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
        ["spec.scheduling.tolerations[0].value: Forbidden: value must be empty when operator is Exists"],
    ),
    (
        "queue-env-name",
        queue_manifest(env=[{"name": "A=B", "value": "1"}]),
        ["spec.env[0].name", "should match"],
    ),
    ("queue-relative-workdir", queue_manifest(workingDir="src"), ["spec.workingDir", "should match"]),
    (
        "queue-name-not-label",
        queue_manifest("team.dev"),
        ["metadata.name must be a DNS label of at most 63 characters"],
    ),
]


# --- changes refused by the CRDs' transition rules (oldSelf): each a job created, then patched -----

# (case, the job as created, the spec patch refused, what the refusal says)
TRANSITIONS: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    (
        "queue-immutable",
        job_manifest("queue-immutable"),
        {"jobQueue": "other"},
        ["spec.jobQueue: Forbidden: jobQueue is immutable"],
    ),
    # a running job's size is in every node's launch (--nnodes, WORLD_SIZE): a half-applied change
    # (Job parallelism moved, launch unchanged) is impossible because the API refuses the change
    (
        "nodes-immutable",
        job_manifest("nodes-immutable", numNodes=2),
        {"numNodes": 3},
        ["spec.numNodes: Forbidden: numNodes and numGPUs are immutable"],
    ),
    (
        "gpus-immutable",
        job_manifest("gpus-immutable", numNodes=None, numGPUs=8),
        {"numGPUs": 16},
        ["spec.numNodes: Forbidden: numNodes and numGPUs are immutable"],
    ),
    (
        "size-respelled",  # switching how the size is given
        job_manifest("size-respelled", numNodes=None, numGPUs=8),
        {"numGPUs": None, "numNodes": 1},
        ["spec.numNodes: Forbidden: numNodes and numGPUs are immutable"],
    ),
    (
        "generation-shrinks",
        job_manifest("generation-shrinks", workspace={"generation": 2}),
        {"workspace": {"generation": 1}},
        ["spec.workspace.generation", "workspace.generation may only grow"],
    ),
]


class Answer(NamedTuple):
    refusal: str  # kubectl's stderr, "" when the request was accepted
    then_editable: bool = True  # a transition case: another field could still be changed after


@pytest.fixture(scope="module")
def answers(crds: Cluster) -> Iterator[dict[str, Answer]]:
    """The API server's answer to every INVALID case (a server-side dry-run create) and every
    TRANSITIONS case (a create, the refused patch, then a patch of `suspend`), asked once in a
    namespace of their own."""
    ns = f"t-rules-{uuid.uuid4().hex[:6]}"
    crds.kubectl("create", "namespace", ns)
    out: dict[str, Answer] = {}
    try:
        for case, manifest, _ in INVALID:
            proc = crds.kubectl(
                "create", "--dry-run=server", "-n", ns, "-f", "-", input=yaml.safe_dump(manifest), check=False
            )
            out[case] = Answer(proc.stderr if proc.returncode else "")
        for case, manifest, patch, _ in TRANSITIONS:
            crds.apply(manifest, namespace=ns)
            name = manifest["metadata"]["name"]
            refused = crds.kubectl(
                "patch", "tj", name, "-n", ns, "--type=merge", "-p", json.dumps({"spec": patch}), check=False
            )
            suspend = crds.kubectl(
                "patch", "tj", name, "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}', check=False
            )
            out[case] = Answer(refused.stderr if refused.returncode else "", suspend.returncode == 0)
        yield out
    finally:
        crds.delete_namespace(ns)


def rules(crd: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every x-kubernetes-validations rule of a CRD with the field path the API server reports its
    refusal at (`spec.overrides.env[*]` for a list's items; "" for the object itself)."""

    def walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for rule in node.get("x-kubernetes-validations", []):
            yield path + rule.get("fieldPath", ""), rule
        for key, sub in node.get("properties", {}).items():
            yield from walk(sub, f"{path}.{key}" if path else key)
        for sub in (node.get("items"), node.get("additionalProperties")):
            if isinstance(sub, dict):
                yield from walk(sub, f"{path}[*]")

    return [
        found
        for version in crd["spec"]["versions"]
        for found in walk(version["schema"]["openAPIV3Schema"], "")
    ]


def test_every_validation_rule_of_the_crds_refuses_one_of_the_cases(answers: dict[str, Answer]) -> None:
    """Each CEL rule of crd/ (its message, at its field) is in the API server's refusal of at
    least one INVALID or TRANSITIONS case: a rule nobody breaks on purpose is a rule nobody knows
    works, and a rule added without a case fails here."""
    refusals = "\n".join(a.refusal for a in answers.values())
    untested = []
    for path in sorted((REPO / "crd").glob("*.yaml")):
        for field, rule in rules(yaml.safe_load(path.read_text())):
            at = re.escape(field).replace(r"\[\*\]", r"\[\d+\]") + ": " if field else ""
            if not re.search(at + r"[^\n]*" + re.escape(rule["message"][:50]), refusals):
                untested.append(f"{path.name}: {field or '<object>'}: {rule['message']}")
    assert not untested, "rules no case breaks:\n" + "\n".join(untested)


@pytest.mark.parametrize(
    ("case", "expected"), [(c, e) for c, _, _, e in TRANSITIONS], ids=[c for c, *_ in TRANSITIONS]
)
def test_a_transition_rule_refuses_the_change_and_leaves_other_fields_editable(
    answers: dict[str, Answer], case: str, expected: list[str]
) -> None:
    answer = answers[case]
    assert answer.refusal, "accepted"
    for fragment in expected:
        assert fragment in answer.refusal, f"{fragment!r} not in {answer.refusal!r}"
    assert answer.then_editable, "spec.suspend could not be changed after"


@pytest.mark.parametrize(
    ("case", "expected"), [(c, e) for c, _, e in INVALID], ids=[c for c, _, _ in INVALID]
)
def test_invalid_manifest_is_rejected_naming_the_field(
    answers: dict[str, Answer], case: str, expected: list[str]
) -> None:
    refusal = answers[case].refusal
    assert refusal, f"accepted: {case}"
    for fragment in expected:
        assert fragment in refusal, f"{fragment!r} not in {refusal!r}"
