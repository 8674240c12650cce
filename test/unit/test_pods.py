"""What a pod's manifest says (controller/pods.py): the one live, ready and node-rank test every
controller, the autoscaler, the progress endpoint and the plugin share."""

from __future__ import annotations

from typing import Any

import pytest

from controller.pods import COMPLETION_INDEX_ANNOTATION, is_live, is_ready, node_rank


def pod(phase: str | None = "Running", *, deleting: bool = False, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "annotations": annotations}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase} if phase else {}}


@pytest.mark.parametrize(
    ("phase", "deleting", "live"),
    [
        ("Pending", False, True),
        ("Running", False, True),
        (None, False, True),  # no status yet: waiting to run
        ("Unknown", False, True),
        ("Running", True, False),  # terminating
        ("Succeeded", False, False),
        ("Failed", False, False),
    ],
)
def test_a_pod_is_live_until_it_ended_or_is_terminating(
    phase: str | None, deleting: bool, live: bool
) -> None:
    assert is_live(pod(phase, deleting=deleting)) is live


def test_ready_is_the_ready_condition_true() -> None:
    ready = {**pod(), "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    not_ready = {**pod(), "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    assert (is_ready(ready), is_ready(not_ready), is_ready(pod())) == (True, False, False)


def test_node_rank_is_the_completion_index_annotation() -> None:
    assert node_rank(pod(**{COMPLETION_INDEX_ANNOTATION: "3"})) == 3
    assert node_rank(pod(**{COMPLETION_INDEX_ANNOTATION: "x"})) is None
    assert node_rank(pod()) is None
