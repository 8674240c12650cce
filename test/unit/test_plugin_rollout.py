"""When `kubectl torchrun sync` may say a job runs a generation (`plugin/rollout.py`), and how
every wait of the plugin says what it waits for: one line per change (`watch.Announcer`)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.plugin.errors import PluginError
from controller.plugin.rollout import on_generation
from controller.plugin.watch import Announcer, Waiting, held_up

JOB_UID = "job-uid"
WORKERS_UID = "workers-uid"
SYNCED = "2026-01-02T11:00:10Z"


def job(generation: int = 1, synced: str | None = SYNCED, nodes: int = 2, **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"workspaceGeneration": generation, "nodes": nodes, "conditions": []}
    if synced is not None:
        status["workspaceSyncTime"] = synced
    return {
        "metadata": {"name": "train", "uid": JOB_UID},
        "spec": {"workspace": {"generation": generation}, **spec},
        "status": status,
    }


def owned(uid: str) -> list[dict[str, Any]]:
    return [{"controller": True, "uid": uid}]


def worker_job(made_for: int = 0) -> dict[str, Any]:
    annotations = {"torchrun.ai/workspace-generation": str(made_for)}
    return {
        "metadata": {
            "name": "train",
            "uid": WORKERS_UID,
            "ownerReferences": owned(JOB_UID),
            "annotations": annotations,
        }
    }


def pod(
    name: str, created: str, phase: str = "Running", terminating: bool = False, **status: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created, "ownerReferences": owned(WORKERS_UID)}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-02T11:00:40Z"
    return {"metadata": meta, "status": {"phase": phase, **status}}


OLD = [pod("train-0-a", "2026-01-02T11:00:00Z"), pod("train-1-a", "2026-01-02T11:00:00Z")]


def test_a_generation_in_use_is_not_yet_run_while_only_the_old_workers_exist() -> None:
    assert on_generation(job(), worker_job(), OLD, 1) == Waiting(
        "generation 1: 0/2 worker pods started on it are Running;"
        " 2 worker pod(s) of the older code not gone yet"
    )
    evicted = [pod(p["metadata"]["name"], "2026-01-02T11:00:00Z", "Failed", terminating=True) for p in OLD]
    assert on_generation(job(), worker_job(), evicted, 1) == Waiting(
        "generation 1: 0/2 worker pods started on it are Running;"
        " 2 worker pod(s) of the older code not gone yet"
    )


def test_it_runs_once_the_node_count_of_pods_created_after_the_sync_are_running() -> None:
    unplaced = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                "message": "0/4 nodes are available"}]}  # fmt: skip
    half = [
        pod("train-0-b", "2026-01-02T11:00:30Z"),
        pod("train-1-b", "2026-01-02T11:00:30Z", "Pending", **unplaced),
    ]
    assert on_generation(job(), worker_job(), half, 1) == Waiting(
        "generation 1: 1/2 worker pods started on it are Running,"
        " 1 starting (pod train-1-b: 0/4 nodes are available)"
    )
    new = [pod("train-0-b", "2026-01-02T11:00:30Z"), pod("train-1-b", "2026-01-02T11:00:31Z")]
    assert on_generation(job(), worker_job(), [*new, OLD[0] | {"status": {"phase": "Failed"}}], 1) == (
        "job train runs generation 1"
    )


def test_a_pod_created_in_the_second_of_the_sync_is_old_as_the_controller_evicts_it() -> None:
    same_second = [pod("train-0-b", SYNCED), pod("train-1-b", "2026-01-02T11:00:11Z")]
    assert isinstance(on_generation(job(), worker_job(), same_second, 1), Waiting)


def test_a_worker_job_made_for_the_generation_runs_it_whenever_its_pods_were_made() -> None:
    assert on_generation(job(generation=0), worker_job(made_for=0), OLD, 0) == "job train runs generation 0"


def test_pods_of_another_worker_job_do_not_count() -> None:
    late = [pod("train-0-b", "2026-01-02T11:00:30Z"), pod("train-1-b", "2026-01-02T11:00:30Z")]
    assert on_generation(job(), worker_job(), late, 1) == "job train runs generation 1"
    for p in late:
        p["metadata"]["ownerReferences"] = owned("an-earlier-attempt")
    assert isinstance(on_generation(job(), worker_job(), late, 1), Waiting)
    assert on_generation(job(), None, [], 1) == Waiting(
        "generation 1 is in use; the worker Job train does not exist yet"
    )


def test_until_it_is_in_use_the_workspace_condition_says_why_and_a_failed_sync_ends_the_wait() -> None:
    reloading = job(generation=0)
    reloading["spec"]["workspace"]["generation"] = 1
    reloading["status"]["conditions"] = [
        {"type": "WorkspaceReady", "status": "True", "reason": "Reloading", "message": "generation 0 in use"}
    ]
    assert on_generation(reloading, None, [], 1) == Waiting(
        "generation 1 is not in use yet (Reloading: generation 0 in use)"
    )
    assert on_generation(job(synced=None), None, [], 1) == Waiting(
        "generation 1 is not in use yet (no word from the controller)"
    )
    reloading["status"]["conditions"][0].update(reason="ReloadFailed", message="InvalidArchive: bad")
    with pytest.raises(PluginError) as failed:
        on_generation(reloading, None, [], 1)
    assert failed.value.message == "generation 1 did not sync: InvalidArchive: bad"


def test_a_suspended_job_runs_the_generation_once_resumed() -> None:
    assert (
        on_generation(job(suspend=True), None, [], 1)
        == "job train is suspended: it runs generation 1 once resumed"
    )


def test_the_announcer_says_each_reason_once_and_again_after_progress() -> None:
    said: list[str] = []
    announce = Announcer(said.append)
    for reason in ("a", "a", "b", "b", "a"):
        announce(reason)
    announce.clear()
    announce("a")
    assert said == ["waiting: a", "waiting: b", "waiting: a", "waiting: a"]


def test_a_job_is_held_up_while_a_progress_condition_is_not_true() -> None:
    ready = [{"type": t, "status": "True"} for t in ("Admitted", "WorkspaceReady", "Running")]
    running = {"metadata": {"name": "train"}, "status": {"phase": "Running", "conditions": ready}}
    assert held_up(running) is None
    blocked = {"type": "Running", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes"}
    running["status"]["conditions"] = [*ready[:2], blocked]
    assert held_up(running) == "Running=False Unschedulable: 0/4 nodes"


def test_a_reload_in_place_is_run_once_every_rank_runs_the_generation_named_for_it() -> None:
    """The pods stay (the old ones are the ones that run it): the supervisors' word decides."""
    reloaded = job(generation=2)
    reloaded["status"].update(inPlaceWorkspaceGeneration=2, inPlaceGeneration=3, inPlaceRunningGeneration=2)
    waiting = on_generation(reloaded, worker_job(made_for=1), OLD, 2)
    assert waiting == Waiting("generation 2: every worker restarts on it in place (in-place generation 3)")
    reloaded["status"]["inPlaceRunningGeneration"] = 3
    assert on_generation(reloaded, worker_job(made_for=1), OLD, 2) == (
        "job train runs generation 2 (reloaded in place: the pods stayed)"
    )
    older = job(generation=2)
    older["status"].update(inPlaceWorkspaceGeneration=1, inPlaceGeneration=1, inPlaceRunningGeneration=1)
    assert isinstance(on_generation(older, worker_job(made_for=1), OLD, 2), Waiting)  # not asked in place
