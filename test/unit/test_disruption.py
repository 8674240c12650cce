"""A disrupted rank on the recreate path: a new attempt at once, not counted (torchrunjob/disruption.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from jobspecs import job

from controller.api import JobConditionType, TorchrunJobStatus, from_json
from controller.api.reasons import Reason
from controller.torchrunjob.disruption import disrupted_restart

SYNCED = datetime(2026, 11, 28, 9, 0, 0, tzinfo=UTC)


def pod(
    name: str, rank: int, *, disrupted: bool = False, created: str = "2026-11-28T09:00:05Z"
) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True"}]
    if disrupted:
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "EvictionByEvictionAPI",
                "message": "drained",
            }
        )
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "annotations": {"batch.kubernetes.io/job-completion-index": str(rank)},
        },
        "status": {"phase": "Running", "conditions": conditions},
    }


def status(**fields: Any) -> TorchrunJobStatus:
    return from_json(TorchrunJobStatus, {"restarts": 2, "restartsByReason": {"WorkersFailed": 2}, **fields})


def test_a_disrupted_rank_starts_a_new_attempt_uncounted() -> None:
    s = status(retriableFailures=3)
    pods = [pod("j-0-a", 0), pod("j-1-b", 1, disrupted=True)]
    decided = disrupted_restart(job(), pods, s, made_for=0, suspended=False)
    assert decided is not None and decided.stop
    assert decided.changes == {"disruptions": 1, "retriable_failures": 0}  # restarts untouched
    (cond,) = decided.conditions
    assert (cond.type, cond.status, cond.reason) == (JobConditionType.RUNNING, False, Reason.RESTARTING)
    assert "node rank 1's pod j-1-b was disrupted (EvictionByEvictionAPI: drained)" in cond.message
    assert "not counted as a restart (disruption 1)" in cond.message
    after = status(disruptions=1)
    assert after.attempt == s.attempt + 1  # a new worker Job, restarts as they were
    assert (
        disrupted_restart(job(), [pod("j-0-a", 0), pod("j-1-b", 1)], s, made_for=0, suspended=False) is None
    )


def test_a_job_that_heals_itself_or_a_suspended_attempt_is_left_alone() -> None:
    pods = [pod("j-0-a", 0, disrupted=True)]
    elastic = job(elastic={"minNodes": 1, "maxNodes": 2})
    assert disrupted_restart(elastic, pods, status(), made_for=0, suspended=False) is None
    torchrun_restarts = job(distributed={"maxRestarts": 3})
    assert disrupted_restart(torchrun_restarts, pods, status(), made_for=0, suspended=False) is None
    assert disrupted_restart(job(), pods, status(), made_for=0, suspended=True) is None  # Kueue took it back


def test_the_hot_reloads_own_evictions_are_no_disruption_a_replacements_is() -> None:
    synced = status(workspaceGeneration=2, workspaceSyncTime="2026-11-28T09:00:00Z")
    rolled = pod("j-0-a", 0, disrupted=True, created="2026-11-28T08:59:00Z")  # made before the sync
    assert disrupted_restart(job(), [rolled], synced, made_for=1, suspended=False) is None
    assert disrupted_restart(job(), [rolled], synced, made_for=2, suspended=False) is not None  # no roll
    later = pod("j-0-c", 0, disrupted=True, created="2026-11-28T09:00:10Z")  # the roll's replacement
    decided = disrupted_restart(job(), [rolled, later], synced, made_for=1, suspended=False)
    assert decided is not None and "pod j-0-c was disrupted" in decided.conditions[0].message
