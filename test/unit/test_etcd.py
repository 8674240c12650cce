"""The managed etcd of etcd-v2 rendezvous: its builders, the endpoint the workers get, and what its
pod's state means (pure; the real etcd 3.5 answering the v2 API is in
test/integration/test_torchrun_compat.py, the objects on the control plane in test_torchrunjob)."""

from __future__ import annotations

from typing import Any

import pytest
from testbed import pins

from controller.api import TorchrunJob, TorchrunQueue
from controller.api.distributed import DEFAULT_ETCD_IMAGE
from controller.torchrunjob.manifests.common import restart_of
from controller.torchrunjob.manifests.etcd import (
    build_etcd_pod,
    build_etcd_service,
    etcd_state,
    has_ended,
)
from controller.torchrunjob.manifests.rendezvous import rendezvous


def queue(**spec: Any) -> TorchrunQueue:
    base: dict[str, Any] = {"nodeResources": {"gpus": 8}, "image": "img:1", **spec}
    return TorchrunQueue.from_json({"metadata": {"name": "q"}, "spec": base})


def job(**distributed: Any) -> TorchrunJob:
    spec = {
        "jobQueue": "q",
        "numNodes": 2,
        "command": "python train.py",
        "distributed": {"rdzvBackend": "etcd-v2", **distributed},
    }
    return TorchrunJob.from_json({"metadata": {"name": "j", "namespace": "ns", "uid": "u-1"}, "spec": spec})


def test_etcd_v2_without_an_endpoint_means_the_managed_etcd() -> None:
    for j in (job(), job(managedEtcd=True)):
        assert j.spec.distributed.runs_managed_etcd
        rdzv = rendezvous(j)
        assert (rdzv.backend, rdzv.endpoint, rdzv.run_id) == ("etcd-v2", "j-etcd:2379", "u-1")
    own = job(rdzvEndpoint="etcd.infra:2379")
    assert not own.spec.distributed.runs_managed_etcd
    assert rendezvous(own).endpoint == "etcd.infra:2379"


def test_the_service_is_the_endpoint_the_workers_get() -> None:
    svc = build_etcd_service(job())
    pod = build_etcd_pod(job(), queue())
    host, port = rendezvous(job()).endpoint.split(":")
    assert svc["metadata"]["name"] == host == pod["metadata"]["name"]
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["port"] == int(port) and svc_port["targetPort"] == "client"
    (c,) = pod["spec"]["containers"]
    assert {"name": "client", "containerPort": int(port), "protocol": "TCP"} in c["ports"]
    assert f"--listen-client-urls=http://0.0.0.0:{port}" in c["args"]
    assert (
        svc["spec"]["selector"]
        == pod["metadata"]["labels"]
        == {
            "torchrun-job-name": "j",
            "torchrun.ai/role": "etcd",
        }
    )
    for obj in (svc, pod):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("TorchrunJob", "u-1", True)


def test_the_pod_serves_the_v2_api_with_modest_set_resources() -> None:
    pod = build_etcd_pod(job(), queue(), restart=3)
    (c,) = pod["spec"]["containers"]
    assert c["image"] == DEFAULT_ETCD_IMAGE and c["command"] == ["/usr/local/bin/etcd"]
    assert "--enable-v2=true" in c["args"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/keys", "port": "client"}
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert set(c["resources"]["limits"]) == {"cpu", "memory"}  # no GPU
    assert c["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["readOnlyRootFilesystem"]
    assert pod["spec"]["restartPolicy"] == "Always"
    assert restart_of(pod) == 3


def test_queue_settings_the_etcd_takes_and_those_it_does_not() -> None:
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    q = queue(
        etcdImage="registry.local/etcd:3.5.21",
        imagePullSecrets=[{"name": "mirror"}],
        scheduling={"nodeSelector": {"gpu": "h100"}, "tolerations": [toleration], "priorityClassName": "hi"},
        podAnnotations={"sidecar": "inject"},
    )
    pod = build_etcd_pod(job(), q)
    spec = pod["spec"]
    assert spec["containers"][0]["image"] == "registry.local/etcd:3.5.21"
    assert spec["imagePullSecrets"] == [{"name": "mirror"}]
    assert spec["tolerations"] == [toleration] and spec["priorityClassName"] == "hi"
    assert "nodeSelector" not in spec and "schedulerName" not in spec
    assert "sidecar" not in pod["metadata"]["annotations"]


def test_the_default_image_is_the_etcd_the_tests_build() -> None:
    versions = pins()
    assert DEFAULT_ETCD_IMAGE.endswith(":" + versions["ETCD_V2_VERSION"])
    assert versions["ETCD_V2_VERSION"].startswith("v3.5.")  # 3.6 removed the v2 API


def pod(
    phase: str = "Pending", conditions: list[dict[str, Any]] | None = None, **status: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "j-etcd"},
        "status": {"phase": phase, "conditions": conditions or [], **status},
    }


@pytest.mark.parametrize(
    ("obj", "ready", "reason", "needle"),
    [
        (None, False, "WaitingForEtcd", "creating"),
        (pod(), False, "WaitingForEtcd", "pod j-etcd"),
        (pod("Running", [{"type": "Ready", "status": "True"}]), True, "", ""),
        (
            pod(
                conditions=[
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/4 nodes",
                    }
                ]
            ),
            False,
            "Unschedulable",
            "etcd pod j-etcd: 0/4 nodes",
        ),
        (
            pod(
                containerStatuses=[
                    {
                        "name": "etcd",
                        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}},
                    }
                ]
            ),
            False,
            "EtcdFailing",
            "spec.etcdImage",
        ),
        (
            pod(
                "Running",
                [{"type": "Ready", "status": "False"}],
                containerStatuses=[{"name": "etcd", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
            ),
            False,
            "EtcdFailing",
            "etcd 3.5",
        ),
    ],
)
def test_what_the_pod_says(obj: dict[str, Any] | None, ready: bool, reason: str, needle: str) -> None:
    state = etcd_state(obj, queue())
    assert (state.ready, state.reason) == (ready, reason)
    assert needle in state.message


def test_a_pod_being_deleted_or_ended_is_not_ready() -> None:
    going = pod("Running", [{"type": "Ready", "status": "True"}])
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not etcd_state(going, queue()).ready
    assert has_ended(pod("Failed")) and has_ended(pod("Succeeded")) and not has_ended(pod("Running"))
