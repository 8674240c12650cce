"""The goodput ledger (controller/torchrunjob/goodput.py) over a scripted timeline: the causes it
charges are the script's own, within half a second, with the ledger read back from JSON between
every two passes (what a new leader does), and passes a progress period apart at odd offsets; and
what reads it: the `kubectl torchrun status` line and the per-job metrics."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client import CollectorRegistry

from controller.api import Goodput, from_json, to_json
from controller.cache import Indexer, Lister
from controller.plugin.views import goodput_line
from controller.torchrunjob.goodput import Point, Seen, fold
from controller.torchrunjob.metrics import ProgressCollector

T0 = datetime(2026, 1, 1, 12, 0, 0, 400_000, tzinfo=timezone.utc)
STEP = 0.5  # seconds a step takes
RUNNING = 2.3  # the workers run
TRAINING = 5.0  # the first attempt's training begins (step k done at TRAINING + k * STEP)
CRASH_STEP, SAVED_STEP = 25, 20  # the crash right after step 25; a checkpoint every 10 steps
RESUMED = 22.0  # the second attempt's training begins, from step 20
STALL_STEP, STALL = 40, 4.0  # after step 40, no step for 4 s
LAST = 60


def step_done(step: int, attempt: int) -> float:
    """When `step` was done in `attempt` (seconds after T0)."""
    if attempt == 0:
        return TRAINING + step * STEP
    t = RESUMED + (step - SAVED_STEP) * STEP
    return t + STALL if step > STALL_STEP else t


CRASHED = step_done(CRASH_STEP, 0)
END = step_done(LAST, 1)


def seen_at(t: float, restart_seen: float) -> Seen:
    """What a status write at `t` says (the pass that counts the restart still sees the ended
    attempt's reports)."""
    restarts = 1 if t >= restart_seen else 0
    attempt = 1 if t > restart_seen else 0
    if attempt == 0:
        steps = [s for s in range(1, CRASH_STEP + 1) if step_done(s, 0) <= t]
    else:
        steps = [s for s in range(SAVED_STEP + 1, LAST + 1) if step_done(s, 1) <= t]
    point = Point(steps[-1], T0 + timedelta(seconds=step_done(steps[-1], attempt))) if steps else None
    saved = SAVED_STEP if attempt == 1 or (steps and steps[-1] >= SAVED_STEP) else None
    running = t >= RUNNING and (attempt == 0 or t >= RESUMED - 1)
    return Seen(admitted=True, running=running, suspended=False, finished=False, restarts=restarts,
                saved_step=saved, point=point)  # fmt: skip


@pytest.mark.parametrize("offset", [0.0, 0.7, 1.9, 2.8])
def test_the_ledger_charges_each_cause_as_the_script_spent_it(offset: float) -> None:
    period = 3.0
    restart_seen = CRASHED + 0.4  # the pass that counts the restart
    passes = sorted({0.0, RUNNING, restart_seen, END + 0.1, *[offset + period * i for i in range(17)]})
    ledger: Goodput | None = None
    for t in passes:
        if t > END + 0.1:
            break
        ledger = fold(ledger, seen_at(t, restart_seen), T0 + timedelta(seconds=t))
        ledger = from_json(Goodput, to_json(ledger))  # a new leader reads it from the status
    assert ledger is not None
    truth = {
        "good": (CRASH_STEP + LAST - CRASH_STEP) * STEP,
        "scheduling": RUNNING,
        "startup": TRAINING - RUNNING,
        "restarts": RESUMED - CRASHED,
        "redone": (CRASH_STEP - SAVED_STEP) * STEP,
        "stalls": STALL,
    }
    got = {cause: getattr(ledger.seconds, cause) for cause in truth}
    assert got == pytest.approx(truth, abs=0.5), (got, truth)
    assert ledger.since is not None
    counted_to = (ledger.since + timedelta(seconds=ledger.mark) - T0).total_seconds()
    assert counted_to == pytest.approx(END, abs=0.01)  # the last step observation
    assert ledger.percent == round(100 * truth["good"] / END) and ledger.summary == f"{ledger.percent}%"


def test_a_point_already_counted_and_a_pass_without_one_change_nothing() -> None:
    running = Seen(admitted=True, running=True, suspended=False, finished=False, restarts=0)
    ledger = fold(None, running, T0)
    for step, t in ((1, 3.0), (5, 5.0)):
        point = Point(step, T0 + timedelta(seconds=t))
        ledger = fold(ledger, Seen(True, True, False, False, 0, point=point), T0 + timedelta(seconds=t + 0.2))
    assert ledger is not None and ledger.state == "Training"
    again = fold(ledger, Seen(True, True, False, False, 0, point=Point(5, T0 + timedelta(seconds=5))), T0)
    silent = fold(ledger, running, T0 + timedelta(seconds=60))
    assert again == ledger and silent == ledger


def test_a_job_never_admitted_has_no_ledger_and_a_finished_one_stops() -> None:
    assert fold(None, Seen(False, False, False, False, 0), T0) is None
    ledger = fold(None, Seen(True, False, False, False, 0), T0)
    done = fold(ledger, Seen(True, False, False, True, 0), T0 + timedelta(seconds=5))
    assert done is not None and done.state == "Done" and done.seconds.scheduling == pytest.approx(0)
    assert fold(done, Seen(True, True, False, False, 0), T0 + timedelta(seconds=50)) == done


LEDGER = {
    "summary": "60%",
    "percent": 60,
    "seconds": {
        "good": 60.0,
        "scheduling": 5.0,
        "startup": 4.0,
        "restarts": 15.0,
        "redone": 10.0,
        "stalls": 6.0,
    },
}


def test_the_status_line_and_the_metrics_read_the_ledger() -> None:
    job = {"metadata": {"namespace": "ns", "name": "a"}, "status": {"goodput": LEDGER}}
    assert goodput_line(job) == "60% (scheduling 5%, startup 4%, restarts 15%, redone 10%, stalls 6%)"
    assert (
        goodput_line({"metadata": {"name": "b"}, "status": {"goodput": {"seconds": {"startup": 3.0}}}})
        is None
    )
    jobs = Indexer()
    jobs.add(job)
    jobs.add({"metadata": {"namespace": "ns", "name": "c"}, "status": {}})
    registry = CollectorRegistry()
    registry.register(ProgressCollector(Lister(jobs)))
    samples = {
        (s.name, s.labels.get("cause", "")): s.value
        for f in registry.collect()
        for s in f.samples
        if s.name.startswith("torchrun_job_goodput")
    }
    assert samples[("torchrun_job_goodput_ratio", "")] == pytest.approx(0.6)
    assert samples[("torchrun_job_goodput_seconds", "restarts")] == 15.0
    assert len(samples) == 1 + 6  # job c has no ledger
