"""Admission as a pure function: every refusal reason, and what an admitted job resolves to."""

from __future__ import annotations

from typing import Any

from controller.api import TorchrunJob
from controller.torchrunjob.admission import Admission, Refusal, admit


def job(**spec: Any) -> TorchrunJob:
    base = {"jobQueue": "q", "numNodes": 2, "command": "python train.py", "workspace": {"source": "none"}}
    return TorchrunJob.from_json(
        {"metadata": {"name": "j", "namespace": "ns", "uid": "u"}, "spec": {**base, **spec}}
    )


def queue(ready: str | None = "True", reason: str = "Ready", **spec: Any) -> dict[str, Any]:
    conditions = (
        [
            {
                "type": "Ready",
                "status": ready,
                "reason": reason,
                "message": "m",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
        if ready
        else []
    )
    body = {"nodeResources": {"gpus": 8}, "image": "img:1", **spec}
    return {"metadata": {"name": "q", "uid": "qu"}, "spec": body, "status": {"conditions": conditions}}


def refusal(verdict: Admission | Refusal) -> tuple[str, str]:
    assert isinstance(verdict, Refusal), verdict
    return verdict.reason, verdict.message


def test_a_missing_queue_is_waited_for() -> None:
    assert refusal(admit(job(), None)) == (
        "QueueNotFound",
        "TorchrunQueue q does not exist; the job starts when it is created",
    )


def test_a_queue_that_is_not_ready_is_quoted() -> None:
    reason, message = refusal(admit(job(), queue("False", "StorageClassNotFound")))
    assert reason == "QueueNotReady" and message == "TorchrunQueue q is not Ready: StorageClassNotFound: m"
    assert refusal(admit(job(), queue(None)))[1] == "TorchrunQueue q is not Ready yet"


def test_invalid_specs_and_commands_are_refused_naming_the_problem() -> None:
    reason, message = refusal(admit(job(numNodes=None, numGPUs=12), queue()))
    assert reason == "InvalidSpec" and "numGPUs" in message
    assert refusal(admit(job(command="python -m"), queue())) == (
        "InvalidCommand",
        "spec.command: `python -m` needs a module name",
    )


def test_an_admitted_job_carries_its_topology_and_launch() -> None:
    verdict = admit(job(), queue())
    assert isinstance(verdict, Admission)
    assert (verdict.topology.nodes, verdict.topology.total_gpus) == (2, 16)
    assert verdict.message == "queue q: 2 node(s) × 8 process(es), 16 GPU(s)"


def test_etcd_v2_rendezvous_is_admitted_with_or_without_an_endpoint() -> None:
    for distributed in (
        {"rdzvBackend": "etcd-v2"},  # the seed's examples: the controller runs the etcd
        {"rdzvBackend": "etcd-v2", "managedEtcd": True},
        {"rdzvBackend": "etcd-v2", "rdzvEndpoint": "etcd.infra:2379"},
    ):
        assert isinstance(admit(job(distributed=distributed), queue()), Admission), distributed


def test_a_cpu_only_queue_admits_jobs_by_node() -> None:
    verdict = admit(job(), queue(nodeResources={"gpus": 0, "cpus": "4"}))
    assert isinstance(verdict, Admission)
    assert verdict.message == "queue q: 2 node(s) × 4 process(es), 0 GPU(s)"


def test_a_queue_that_cannot_be_read_holds_its_jobs_with_a_reason() -> None:
    """A queue written past the schema (here a Ready condition without its transition time) is no
    crash on every pass: the job waits, saying what is wrong with the queue."""
    broken = queue()
    del broken["status"]["conditions"][0]["lastTransitionTime"]
    reason, message = refusal(admit(job(), broken))
    assert reason == "QueueNotReady"
    assert message.startswith("TorchrunQueue q cannot be read: ")
    assert "status.conditions[0].lastTransitionTime" in message
