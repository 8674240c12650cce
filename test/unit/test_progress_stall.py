"""The stall decision as a table, the startup decision as one, and the rate/ETA computation."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from controller.progress.eta import StepHistory, eta, percent
from controller.progress.stall import RankState, Startup, Verdict, decide, lost_after, starting

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
LOST = 96  # no report from any rank for this long, at least: two heartbeat periods (33 s) + 30 s


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ranks(*reports: tuple[int, int | None, float, float]) -> tuple[RankState, ...]:
    """(rank, step, when its record last changed, when its last report arrived)"""
    return tuple(
        RankState(rank, step, at(changed), at(received)) for rank, step, changed, received in reports
    )


@pytest.mark.parametrize(
    ("reported", "timeout", "now", "verdict"),
    [
        # never reported: never stalled, whatever the timeout
        ((), 60, 10_000, Verdict(reporting=False)),
        ((), None, 10_000, Verdict(reporting=False)),
        # no timeout, heartbeats arriving: reporting, never stalled; checked again when it would be lost
        (ranks((0, 5, 0, 9990)), None, 10_000, Verdict(reporting=True, recheck_after=86.0)),
        # no timeout, no report for the lost window: lost, never an action
        (ranks((0, 5, 0, 0)), None, LOST, Verdict(reporting=True, lost=True, since=at(0), awaiting=True)),
        # fresh: the stall would fall due at the newest change + timeout
        (ranks((0, 5, 0, 0)), 60, 10, Verdict(reporting=True, recheck_after=50.0)),
        # heartbeats still arrive and the step does not move: stalled since the last change
        (
            ranks((0, 5, 0, 60)),
            60,
            60,
            Verdict(reporting=True, stalled=True, since=at(0), silent=(0,), recheck_after=LOST),
        ),
        (
            ranks((0, 5, 0, 3590)),
            60,
            3600,
            Verdict(reporting=True, stalled=True, since=at(0), silent=(0,), recheck_after=86.0),
        ),
        # due, but nothing arrived since it fell due (the next heartbeat, or an outage): not yet
        # stalled; the next report decides, or the lost window passes first
        (
            ranks((0, 5, 0, 0)),
            60,
            60,
            Verdict(reporting=True, silent=(0,), recheck_after=36.0, awaiting=True),
        ),
        (
            ranks((0, 5, 0, 59)),
            60,
            70,
            Verdict(reporting=True, silent=(0,), recheck_after=85.0, awaiting=True),
        ),
        # no report from any rank for the lost window: lost — not stalled, nothing restarts
        (
            ranks((0, 5, 0, 0), (1, 5, 0, 0)),
            60,
            LOST,
            Verdict(reporting=True, lost=True, since=at(0), awaiting=True),
        ),
        (ranks((0, 5, 0, 0)), 60, 10_000, Verdict(reporting=True, lost=True, since=at(0), awaiting=True)),
        # a timeout longer than the floor is the lost window
        (ranks((0, 5, 0, 0)), 600, 500, Verdict(reporting=True, recheck_after=100.0)),
        (ranks((0, 5, 0, 0)), 600, 600, Verdict(reporting=True, lost=True, since=at(0), awaiting=True)),
        # one rank still changes: not stalled, the silent one is named
        (
            ranks((0, 5, 0, 110), (1, 9, 100, 110)),
            60,
            120,
            Verdict(reporting=True, silent=(0,), recheck_after=40.0),
        ),
        # all silent, heartbeats arriving: stalled since the newest change of any rank
        (
            ranks((1, 9, 100, 190), (0, 5, 0, 195)),
            60,
            200,
            Verdict(reporting=True, stalled=True, since=at(100), silent=(0, 1), recheck_after=91.0),
        ),
        # one rank's heartbeats arrive, the other's do not: reporting works, so still a stall
        (
            ranks((0, 5, 0, 170), (1, 5, 0, 10)),
            60,
            180,
            Verdict(reporting=True, stalled=True, since=at(0), silent=(0, 1), recheck_after=86.0),
        ),
        # reports resume after the loss, the step moved meanwhile: progressing again
        (ranks((0, 9, 290, 300)), 60, 300, Verdict(reporting=True, recheck_after=50.0)),
        # reports resume and say the step has not moved since before the loss: that is a stall
        (
            ranks((0, 5, 0, 300)),
            60,
            300,
            Verdict(reporting=True, stalled=True, since=at(0), silent=(0,), recheck_after=LOST),
        ),
    ],
)
def test_stall_decision(
    reported: tuple[RankState, ...], timeout: int | None, now: float, verdict: Verdict
) -> None:
    assert decide(reported, timeout, at(now)) == verdict


def test_an_ended_attempt_is_neither_stalled_nor_lost() -> None:
    assert decide(ranks((0, 5, 0, 0)), 60, at(10_000), ended=True) == Verdict(reporting=True)


def test_the_lost_window_is_two_heartbeat_periods_and_a_backoff_or_the_timeout() -> None:
    assert (lost_after(None), lost_after(60), lost_after(600)) == (LOST, LOST, 600)


def test_a_pod_started_since_the_last_change_restarts_the_clock() -> None:
    reported = ranks((0, 5, 0, 150), (1, 5, 0, 150))
    assert decide(reported, 60, at(150), started=at(100)) == Verdict(
        reporting=True, silent=(0, 1), recheck_after=10.0
    )
    assert decide(reported, 60, at(160), started=at(100)) == Verdict(
        reporting=True, silent=(0, 1), recheck_after=86.0, awaiting=True
    )
    heartbeat = ranks((0, 5, 0, 160), (1, 5, 0, 150))
    assert decide(heartbeat, 60, at(160), started=at(100)) == Verdict(
        reporting=True, stalled=True, since=at(0), silent=(0, 1), recheck_after=LOST
    )
    assert decide(ranks((0, 5, 0, 60)), 60, at(60), started=at(-30)).stalled  # a start before the change


def test_a_pod_started_since_the_last_report_is_not_lost_before_the_window_from_its_start() -> None:
    """A hot reload's new pods report nothing until their program writes a record: neither a
    stall (no heartbeat proves one) nor lost, until the lost window counted from the start."""
    reported = ranks((0, 5, 0, 0))
    assert decide(reported, 60, at(150), started=at(100)) == Verdict(
        reporting=True, silent=(0,), recheck_after=10.0
    )
    assert decide(reported, 60, at(170), started=at(100)) == Verdict(
        reporting=True, silent=(0,), recheck_after=26.0, awaiting=True
    )
    assert decide(reported, 60, at(196), started=at(100)) == Verdict(
        reporting=True, lost=True, since=at(0), awaiting=True
    )


def test_stalled_message_names_last_step_since_when_and_silent_ranks() -> None:
    reported = ranks((0, 41, 0, 100), (1, 42, 30, 95))
    verdict = decide(reported, 60, at(100))
    message = verdict.message(reported, 60)
    assert "step 42" in message and "rank 1" in message
    assert "2026-01-01T00:00:30Z" in message
    assert "silent: rank 0, rank 1" in message


def test_progressing_message_names_the_newest_step() -> None:
    reported = ranks((0, 41, 0, 90), (1, 42, 90, 90))
    message = decide(reported, 60, at(100)).message(reported, 60)
    assert message.startswith("step 42 reported by rank 1 at 2026-01-01T00:01:30Z")
    assert "silent for 60s or more: rank 0" in message


def test_lost_message_says_when_the_last_report_arrived_and_that_nothing_is_done() -> None:
    reported = ranks((0, 41, 0, 20), (1, 42, 30, 30))
    message = decide(reported, 60, at(200)).message(reported, 60)
    assert message.startswith("no progress report from any rank for 96s or more")
    assert "the last arrived at 2026-01-01T00:00:30Z, saying step 42 (rank 1)" in message
    assert "no action is taken" in message


# -- startup: no training step since the workers started ------------------------------------


@pytest.mark.parametrize(
    ("reported", "timeout", "now", "started", "shown", "verdict"),
    [
        # no startup timeout: never StartupStalled, whatever the silence
        ((), None, 10_000, 0, None, None),
        # not every worker runs yet: the clock has not started
        ((), 60, 10_000, None, None, None),
        # before the timeout: a timer for when it falls due (no report will come to say so)
        ((), 60, 10, 0, None, Startup(since=at(0), timeout=60, recheck_after=50.0)),
        ((), 60, 70, 30, None, Startup(since=at(30), timeout=60, recheck_after=20.0)),
        # nothing from any rank by the timeout: a hang before any record (rendezvous, NCCL init)
        ((), 60, 60, 0, None, Startup(since=at(0), timeout=60, stalled=True, never=(0, 1))),
        # one rank's step since the start ends the startup for all (the world formed); the
        # other rank never reporting is rank-0-only reporting, not a hang
        (ranks((0, 1, 20, 20)), 60, 10_000, 0, None, None),
        (ranks((1, 0, 59, 59)), 60, 60, 0, None, None),
        # a record without a step says the program runs, not that it trains: the silent rank and
        # the stepless one are named apart
        (
            ranks((0, None, 5, 58)),
            60,
            60,
            0,
            None,
            Startup(since=at(0), timeout=60, stalled=True, never=(1,), stepless=(0,)),
        ),
        # a step from before the start (the pods of a hot reload's earlier generation) is not one
        (
            ranks((0, 9, -50, -1), (1, 9, -50, -1)),
            60,
            60,
            0,
            None,
            Startup(since=at(0), timeout=60, stalled=True, never=(0, 1)),
        ),
        # a step the status shows since the start counts (a new leader has not heard it yet) ...
        ((), 60, 10_000, 0, 30, None),
        ((), 60, 10_000, 0, 0, None),
        # ... one shown from before the start does not
        ((), 60, 60, 0, -10, Startup(since=at(0), timeout=60, stalled=True, never=(0, 1))),
        # a step told a few seconds before the start counts: the start is the node's clock in
        # whole seconds, the change the controller's less the reporter's age
        (ranks((0, 1, -4, 2)), 60, 60, 0, None, None),
        ((), 60, 60, 0, -4, None),
    ],
)
def test_startup_decision(
    reported: tuple[RankState, ...],
    timeout: int | None,
    now: float,
    started: float | None,
    shown: float | None,
    verdict: Startup | None,
) -> None:
    when = None if started is None else at(started)
    seen = None if shown is None else at(shown)
    assert starting(reported, 2, timeout, at(now), when, seen) == verdict


def test_startup_stalled_message_names_the_timeout_the_start_and_the_silent_ranks() -> None:
    message = Startup(since=at(30), timeout=300, stalled=True, never=(1, 2), stepless=(0,)).message()
    assert message == (
        "no rank reported a training step within 300s of the workers' start at 2026-01-01T00:00:30Z; "
        "never reported: rank 1, rank 2; reported no step: rank 0"
    )
    many = Startup(since=at(0), timeout=60, stalled=True, never=tuple(range(256))).message()
    assert many.endswith("rank 14, rank 15 and 240 more")


# -- rate and ETA --------------------------------------------------------------------------


def test_rate_needs_two_samples() -> None:
    h = StepHistory()
    assert h.rate() is None
    h.add(0, 10)
    assert h.rate() is None
    h.add(10, 30)
    assert h.rate() == 2.0


def test_rate_is_the_recent_one() -> None:
    h = StepHistory()
    h.add(0, 0)
    h.add(1000, 10)  # a slow start: 0.01 steps/s
    for t in range(1100, 1700, 100):
        h.add(t, 10 + (t - 1000))  # then 1 step/s
    assert h.rate(window=600) == pytest.approx(1.0)
    assert h.rate(window=10_000) == pytest.approx(610 / 1600)


def test_rate_with_one_sample_in_the_window_uses_the_previous_one() -> None:
    h = StepHistory()
    h.add(0, 0)
    h.add(5000, 100)
    assert h.rate(window=600) == pytest.approx(0.02)


def test_a_step_going_back_starts_the_history_again() -> None:
    h = StepHistory()
    h.add(0, 100)
    h.add(10, 200)
    h.add(20, 50)  # restarted from an earlier checkpoint
    assert h.rate() is None
    h.add(30, 70)
    assert h.rate() == 2.0


def test_repeated_steps_keep_their_first_time_and_history_is_bounded() -> None:
    h = StepHistory(max_samples=4)
    h.add(0, 1)
    h.add(50, 1)
    h.add(100, 101)
    assert h.rate() == 1.0
    for i in range(100):
        h.add(200 + i, 200 + i)
    assert len(h._samples) == 4


@pytest.mark.parametrize(
    ("step", "total", "rate", "expected"),
    [
        (100, 1000, 2.0, at(450)),
        (1000, 1000, None, at(0)),  # done: now
        (1200, 1000, 5.0, at(0)),
        (None, 1000, 2.0, None),
        (100, None, 2.0, None),
        (100, 1000, None, None),
        (100, 1000, 0.0, None),
        (100, 1000, -1.0, None),
        (0, 2**53, 1e-9, None),  # beyond ten years
    ],
)
def test_eta(step: int | None, total: int | None, rate: float | None, expected: datetime | None) -> None:
    assert eta(step, total, rate, at(0)) == expected


@pytest.mark.parametrize(
    ("step", "total", "expected"),
    [(0, 10, 0), (419, 1000, 41), (999, 1000, 99), (1000, 1000, 100), (5000, 1000, 100), (5, None, None)],
)
def test_percent(step: int, total: int | None, expected: int | None) -> None:
    assert percent(step, total) == expected
