"""Conditions: lastTransitionTime moves only with status, inputs are never mutated."""

from __future__ import annotations

import datetime

from controller.api import (
    Condition,
    ConditionStatus,
    find_condition,
    is_true,
    remove_condition,
    set_condition,
)

T0 = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
T1 = T0 + datetime.timedelta(minutes=5)
T2 = T0 + datetime.timedelta(minutes=9)


def test_new_condition_is_appended_with_now() -> None:
    conds = set_condition((), "Ready", True, "QueueReady", "ok", 3, T0)
    assert conds == (Condition("Ready", ConditionStatus.TRUE, "QueueReady", T0, "ok", 3),)


def test_transition_time_moves_only_when_status_changes() -> None:
    conds = set_condition((), "Ready", False, "KaiNotInstalled", "no KAI CRDs", 1, T0)
    same_status = set_condition(conds, "Ready", False, "KaiQueueMissing", "creating it", 2, T1)
    cond = find_condition(same_status, "Ready")
    assert cond is not None
    assert cond.last_transition_time == T0
    assert (cond.reason, cond.message, cond.observed_generation) == ("KaiQueueMissing", "creating it", 2)

    flipped = set_condition(same_status, "Ready", ConditionStatus.TRUE, "QueueReady", "", 2, T2)
    cond = find_condition(flipped, "Ready")
    assert cond is not None
    assert cond.last_transition_time == T2
    assert is_true(flipped, "Ready")


def test_unchanged_condition_returns_the_same_tuple() -> None:
    conds = set_condition((), "Ready", True, "QueueReady", "ok", 1, T0)
    assert set_condition(conds, "Ready", True, "QueueReady", "ok", 1, T1) is conds


def test_other_conditions_keep_their_order_and_input_is_untouched() -> None:
    conds = set_condition((), "Admitted", True, "Admitted", "", 1, T0)
    conds = set_condition(conds, "WorkspaceReady", False, "Syncing", "", 1, T0)
    before = list(conds)
    updated = set_condition(before, "Admitted", False, "QueueNotFound", 'queue "x" not found', 2, T1)
    assert before == list(conds)
    assert [c.type for c in updated] == ["Admitted", "WorkspaceReady"]
    assert updated[1] is conds[1]


def test_find_remove_and_is_true() -> None:
    conds = set_condition((), "Suspended", True, "Suspended", "", 1, T0)
    assert find_condition(conds, "Running") is None
    assert not is_true(conds, "Running")
    assert remove_condition(conds, "Running") is conds
    assert remove_condition(conds, "Suspended") == ()
