"""The job's lifecycle decisions as tables (controller/torchrunjob/lifecycle.py): state in,
conditions + status changes + actions out."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from controller.api import JobConditionType as C
from controller.api.reasons import Reason
from controller.torchrunjob import lifecycle
from controller.torchrunjob.lifecycle import Action
from controller.torchrunjob.starting import Blocked
from controller.torchrunjob.status import Outcome

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=timezone.utc)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def conds(d: lifecycle.Decision) -> list[tuple[str, bool, str]]:
    return [(c.type, c.status, c.reason) for c in d.conditions]


@pytest.mark.parametrize(
    ("limit", "suspended", "started", "ttl", "timer", "stop", "actions"),
    [
        (None, False, ago(50), None, None, False, ()),  # no deadline
        (100, False, None, None, None, False, ()),  # not started yet
        (100, True, ago(500), None, None, False, ()),  # suspended: not checked
        (100, False, ago(40), None, 60.0, False, ()),  # a timer for the exact moment
        (100, False, ago(100), None, None, True, (Action.DELETE_WORKERS,)),  # at the deadline
        (100, False, ago(150), 30, 30.0, True, (Action.DELETE_WORKERS,)),  # over, then its TTL
        (100, False, ago(150), 0, None, True, (Action.DELETE_WORKERS, Action.DELETE_JOB)),
    ],
)
def test_deadline(
    limit: int | None,
    suspended: bool,
    started: datetime | None,
    ttl: int | None,
    timer: float | None,
    stop: bool,
    actions: tuple[Action, ...],
) -> None:
    d = lifecycle.deadline(limit, suspended, started, ttl, NOW)
    assert (d.requeue_after, d.stop, d.actions) == (timer, stop, actions)
    if stop:
        assert conds(d) == [
            (C.RUNNING, False, Reason.DEADLINE_EXCEEDED),
            (C.FAILED, True, Reason.DEADLINE_EXCEEDED),
        ]
        assert d.changes == {"completion_time": NOW}
    else:
        assert not d.conditions and not d.changes


@pytest.mark.parametrize(
    ("ttl", "completed", "timer", "actions"),
    [
        (None, ago(10), None, ()),
        (60, ago(10), 50.0, ()),
        (60, ago(60), None, (Action.DELETE_JOB,)),
        (60, None, 60.0, ()),  # finishing in this pass: counted from now
        (0, None, None, (Action.DELETE_JOB,)),
    ],
)
def test_ttl(
    ttl: int | None, completed: datetime | None, timer: float | None, actions: tuple[Action, ...]
) -> None:
    d = lifecycle.ttl(ttl, completed, NOW)
    assert (d.requeue_after, d.actions) == (timer, actions)


@pytest.mark.parametrize(
    ("etcd", "autoclean", "running", "actions"),
    [
        (False, False, False, ()),
        (False, False, True, (Action.DELETE_WORKERS,)),  # a deadline or the retriable cap
        (True, False, False, (Action.REMOVE_ETCD,)),
        (
            True,
            True,
            False,
            (
                Action.REMOVE_ETCD,
                Action.REMOVE_ETCD_SERVICE,
                Action.DELETE_WORKERS,
                Action.DELETE_SERVICE,
                Action.CLEAN_WORKSPACE,
            ),
        ),
        (False, True, False, (Action.DELETE_WORKERS, Action.DELETE_SERVICE, Action.CLEAN_WORKSPACE)),
    ],
)
def test_finished(etcd: bool, autoclean: bool, running: bool, actions: tuple[Action, ...]) -> None:
    d = lifecycle.finished(
        managed_etcd=etcd,
        autoclean=autoclean,
        workers_running=running,
        ttl_seconds=None,
        completion_time=ago(5),
        now=NOW,
    )
    assert d.actions == actions and d.stop and not d.conditions


OK = Outcome(True, "SuccessCriteriaMet", "")
FAILED = Outcome(False, "FailedIndexes", "index 1 failed")
PERMANENT = Outcome(False, "PodFailurePolicy", "exit code 3")
CAPPED = Outcome(False, Reason.RETRIABLE_LIMIT, "11 pod failures")


def restarted(restarts: int, by_reason: dict[str, int]) -> dict[str, object]:
    """The changes of a restart: counted in all and by reason (from an empty map here)."""
    return {
        "restarts": restarts,
        "restarts_by_reason": by_reason,
        "retriable_failures": 0,
        "in_place_generation": 0,  # a new worker Job's supervisors start at generation 0
        "in_place_running_generation": None,
        "in_place_running_time": None,
        "in_place_restart_time": None,
    }


@pytest.mark.parametrize(
    ("outcome", "restarts", "limit", "expected", "changes", "actions"),
    [
        (
            OK,
            0,
            3,
            [(C.RUNNING, False, Reason.COMPLETED), (C.SUCCEEDED, True, Reason.SUCCEEDED)],
            {"completion_time": NOW},
            (),
        ),
        (FAILED, 0, 3, [(C.RUNNING, False, Reason.RESTARTING)], restarted(1, {"FailedIndexes": 1}), ()),
        (FAILED, 2, 3, [(C.RUNNING, False, Reason.RESTARTING)], restarted(3, {"FailedIndexes": 1}), ()),
        (
            FAILED,
            3,
            3,
            [(C.RUNNING, False, Reason.FAILED), (C.FAILED, True, Reason.RESTART_LIMIT_EXCEEDED)],
            {"completion_time": NOW},
            (),
        ),
        (
            FAILED,
            0,
            0,
            [(C.RUNNING, False, Reason.FAILED), (C.FAILED, True, Reason.WORKERS_FAILED)],
            {"completion_time": NOW},
            (),
        ),
        (
            PERMANENT,
            0,
            3,
            [(C.RUNNING, False, Reason.FAILED), (C.FAILED, True, Reason.PERMANENT_FAILURE)],
            {"completion_time": NOW},
            (),
        ),
        (
            CAPPED,
            1,
            3,
            [(C.RUNNING, False, Reason.RESTARTING)],
            restarted(2, {str(Reason.RETRIABLE_LIMIT): 1}),
            (),
        ),
        (
            CAPPED,
            3,
            3,
            [(C.RUNNING, False, Reason.FAILED), (C.FAILED, True, Reason.RESTART_LIMIT_EXCEEDED)],
            {"completion_time": NOW},
            (Action.DELETE_WORKERS,),  # its Job still recreates pods
        ),
    ],
)
def test_attempt_ended(
    outcome: Outcome,
    restarts: int,
    limit: int,
    expected: list[tuple[str, bool, str]],
    changes: dict[str, object],
    actions: tuple[Action, ...],
) -> None:
    d = lifecycle.attempt_ended(outcome, restarts=restarts, limit=limit, ttl_seconds=None, now=NOW)
    assert conds(d) == expected
    assert dict(d.changes) == changes
    assert d.actions == actions
    assert d.stop


def test_restarts_are_counted_by_reason_and_bounded() -> None:
    d = lifecycle.attempt_ended(
        FAILED, restarts=2, limit=5, ttl_seconds=None, now=NOW, by_reason={"Stalled": 1, "FailedIndexes": 1}
    )
    assert d.changes["restarts_by_reason"] == {"Stalled": 1, "FailedIndexes": 2}
    assert d.changes["restarts"] == 3
    full = {f"R{i}": 1 for i in range(lifecycle.RESTART_REASONS - 1)}
    counted = lifecycle.count_restart(full, "New")
    assert counted["Other"] == 1 and "New" not in counted and len(counted) == lifecycle.RESTART_REASONS
    assert lifecycle.count_restart(counted, "Newer")["Other"] == 2  # no 33rd key, ever
    assert lifecycle.count_restart(counted, "R0")["R0"] == 2


def test_a_restart_message_counts_the_restart_it_starts() -> None:
    d = lifecycle.attempt_ended(FAILED, restarts=1, limit=3, ttl_seconds=None, now=NOW)
    assert d.conditions[0].message == "restart 2 of 3 after: FailedIndexes: index 1 failed"


def test_success_starts_the_ttl() -> None:
    d = lifecycle.attempt_ended(OK, restarts=0, limit=3, ttl_seconds=30, now=NOW)
    assert d.requeue_after == 30.0


@pytest.mark.parametrize(
    ("count", "cap", "ends"), [(0, 10, False), (10, 10, False), (11, 10, True), (1, 0, True)]
)
def test_retriable_limit(count: int, cap: int, ends: bool) -> None:
    outcome = lifecycle.retriable_limit(count, cap, (75,))
    assert (outcome is not None) == ends
    if outcome is not None:
        assert (
            outcome.reason == Reason.RETRIABLE_LIMIT and not outcome.permanent and "(75)" in outcome.message
        )


@pytest.mark.parametrize(
    ("suspend", "was", "expected"),
    [
        (True, False, [(C.SUSPENDED, True, Reason.SUSPENDED), (C.RUNNING, False, Reason.SUSPENDED)]),
        (True, True, [(C.SUSPENDED, True, Reason.SUSPENDED), (C.RUNNING, False, Reason.SUSPENDED)]),
        (False, True, [(C.SUSPENDED, False, Reason.RESUMED)]),
        (False, False, []),
    ],
)
def test_suspension(suspend: bool, was: bool, expected: list[tuple[str, bool, str]]) -> None:
    assert [(c.type, c.status, c.reason) for c in lifecycle.suspension(suspend, was)] == expected


@pytest.mark.parametrize(
    ("ready", "nodes", "blocked", "reason"),
    [
        (2, 2, None, Reason.ALL_WORKERS_RUNNING),
        (3, 2, None, Reason.ALL_WORKERS_RUNNING),  # an elastic shrink in flight
        (1, 2, None, Reason.WORKERS_STARTING),
        (1, 2, Blocked(Reason.UNSCHEDULABLE, "pod j-1: 0/4 nodes are available"), Reason.UNSCHEDULABLE),
        (0, 2, Blocked(Reason.IMAGE_PULL_FAILED, "pod j-0: ErrImagePull"), Reason.IMAGE_PULL_FAILED),
        (2, 2, Blocked(Reason.IMAGE_PULL_FAILED, "stale words"), Reason.ALL_WORKERS_RUNNING),
    ],
)
def test_running(ready: int, nodes: int, blocked: Blocked | None, reason: Reason) -> None:
    c = lifecycle.running(ready, nodes, blocked)
    assert (c.type, c.status, c.reason) == (C.RUNNING, ready >= nodes, reason)
    if blocked and ready < nodes:
        assert c.message == blocked.message


def test_a_growth_kueue_holds_leaves_the_job_running_unless_something_else_blocks() -> None:
    words = "Kueue workload job-j-3: couldn't assign flavors: insufficient unused quota"
    held = lifecycle.running(2, 3, None, words)
    assert (held.status, held.reason) == (True, Reason.GROWTH_WAITING_FOR_ADMISSION)
    assert held.message == f"2/3 worker pods are running; the growth waits for Kueue: {words}"
    crashing = Blocked(Reason.CONTAINER_CRASH_LOOPING, "pod j-1: CrashLoopBackOff")
    assert lifecycle.running(1, 3, crashing, words).reason == Reason.CONTAINER_CRASH_LOOPING
    assert lifecycle.running(3, 3, None, words).reason == Reason.ALL_WORKERS_RUNNING
