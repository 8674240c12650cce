"""status.goodput on the control plane, against the script's own clock: a 1-node job on kwok
whose "training" is this test posting progress reports as its rank (a pod-bound token, the
controller's HTTPS endpoint) — a known step time, a checkpoint every 10 steps, a crash right after
step 25 (the pod fails with exit code 1: a whole-job restart), the new attempt resuming from step
20, a stall of known length — and the leader replaced by a second controller process in the
middle. The truth is computed from the times this script did each thing, never with the
controller's functions; the ledger the second leader leaves must be within 5 percentage points of
it, for the total and for each cause."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from jobs import make_job, queue_manifest
from reports import Replica, post, replica, report, token, wait_to_lead, worker_pod
from testbed import Cluster, wait_until

from controller.rest import RESTClient, load_config

PERIOD = 2.0  # --progress-period: a status write at most every 2 s while steps move
LEASE = (
    "--leader-elect-lease-duration=4",
    "--leader-elect-renew-deadline=3",
    "--leader-elect-retry-period=1",
)
STEP = 0.4  # seconds a step takes
STARTUP = 3.0  # the workers run, then the first step begins
CRASH_STEP, EVERY = 25, 10  # a crash right after step 25; a checkpoint every 10 steps
RESTART_STARTUP = 1.0  # the new attempt's workers run, then training resumes
STALL_STEP, STALL = 35, 5.0  # after step 35, no step for 5 s (the rank's heartbeats go on)
LAST = 45
TOLERANCE = 5.0  # percentage points


class Bed(NamedTuple):
    namespace: str
    queue: str
    rest: RESTClient
    replicas: list[Replica]
    stop_first: contextlib.ExitStack


@pytest.fixture(scope="module")
def bed(cluster: Cluster, crds: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """A namespace, a queue whose kwok workers run until told otherwise, and two controller
    replicas: the first leads; `stop_first` stops it. Identities of their own: the audit log is
    shared by the modules a worker runs, and test_progress.py counts what its standby wrote
    (reports.replica refuses an identity another namespace used)."""
    ns, queue = f"t-{uuid.uuid4().hex[:8]}", f"q-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(ns)
    cluster.apply(queue_manifest(queue, "run", nodeResources={"gpus": 0, "cpus": "20m"}))
    logs = tmp_path_factory.mktemp("goodput")
    with contextlib.ExitStack() as stack, contextlib.ExitStack() as first:
        leader = first.enter_context(replica(cluster, ns, logs, "goodput-a", PERIOD, *LEASE))
        wait_to_lead(cluster, ns, "goodput-a")
        standby = stack.enter_context(replica(cluster, ns, logs, "goodput-b", PERIOD, *LEASE))
        yield Bed(ns, queue, RESTClient(load_config(str(cluster.kubeconfig))), [leader, standby], first)
    cluster.kubectl("delete", "torchrunqueue", queue, "--wait=false")
    cluster.delete_namespace(ns)


class Rank:
    """Rank 0's reporter, played by the test: posts to whichever replica leads (the other answers
    503), the newest complete checkpoint with each report, as rank 0's sidecar does."""

    def __init__(self, bed: Bed, pod: dict[str, Any]) -> None:
        self.bed, self.token = bed, token(bed, pod)
        self.saved: int | None = None
        self.step, self.changed = 0, time.time()

    def send(self, step: int, done: float | None = None) -> None:
        """Report `step`, done at `done` (now when not given) or, the same step again, when it was."""
        if step != self.step:
            self.step, self.changed = step, time.time() if done is None else done
        if step % EVERY == 0:
            self.saved = step
        body = report("good", step, total=LAST, age=time.time() - self.changed)
        if self.saved is not None:
            body["checkpoint"] = {"name": f"step-{self.saved}", "step": self.saved, "ageSeconds": 0}
        for each in self.bed.replicas:
            with contextlib.suppress(OSError):
                if post(each.url, self.token, body)[0] == 200:
                    return

    def train(self, start: float, first: int, last: int) -> float:
        """Steps `first`..`last`, step k done at `start + (k - first + 1) * STEP`; when the last
        was done."""
        for k in range(first, last + 1):
            due = start + (k - first + 1) * STEP
            time.sleep(max(0.0, due - time.time()))
            self.send(k, due)  # its age says when it was done, however late the post
        return start + (last - first + 1) * STEP

    def stall(self, end: float) -> float:
        """No step until `end`; heartbeats every second. When it ended."""
        while (left := end - time.time()) > 0:
            time.sleep(min(1.0, left))
            self.send(self.step)
        return end


def running_pod(cluster: Cluster, ns: str, uids: set[str]) -> tuple[dict[str, Any], float]:
    """The job's running worker pod not among `uids`, and when this test first saw it run."""
    pod = worker_pod(cluster, ns, "good", not_uids=frozenset(uids))
    return pod, time.time()


def test_goodput_is_within_five_points_of_the_scripts_own_timeline(cluster: Cluster, bed: Bed) -> None:
    ns = bed.namespace
    created = time.time()
    make_job(cluster, ns, bed.queue, "good", numNodes=1, failurePolicy={"maxRestarts": 1})
    pod, ran = running_pod(cluster, ns, set())
    rank = Rank(bed, pod)
    trained = ran + STARTUP
    crashed = rank.train(trained, 1, CRASH_STEP)  # the crash: nothing trains from here on
    failing = (
        "kwok.torchrun.ai/outcome=fail",
        "kwok.torchrun.ai/duration=0s",
        "kwok.torchrun.ai/exit-code=1",
    )
    cluster.kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, *failing, "--overwrite")

    fresh, _ = running_pod(cluster, ns, {pod["metadata"]["uid"]})
    rank = Rank(bed, fresh)
    rank.saved = CRASH_STEP // EVERY * EVERY
    resumed = time.time() + RESTART_STARTUP
    resume_step = rank.saved
    stalled = rank.train(resumed, resume_step + 1, STALL_STEP)
    bed.stop_first.close()  # the leader goes during the stall; the second replica takes over
    unstalled = rank.stall(stalled + STALL)
    ended = rank.train(unstalled, STALL_STEP + 1, LAST)

    def settled() -> dict[str, Any] | None:
        rank.send(LAST)
        ledger = cluster.get("torchrunjob", "good", "-n", ns).get("status", {}).get("goodput") or {}
        return ledger if ledger.get("step") == LAST else None

    ledger = wait_until(settled, 3 * PERIOD + 10, interval=0.5, message="the ledger at the last step")
    lease = cluster.get("lease", "torchrun-controller", "-n", ns)["spec"].get("holderIdentity")
    assert lease == "goodput-b", lease

    truth = {
        "scheduling": ran - created,
        "startup": trained - ran,
        "restarts": resumed - crashed,
        "redone": (CRASH_STEP - resume_step) * STEP,
        "stalls": unstalled - stalled,
    }
    truth["good"] = LAST * STEP  # steps 21..25 done again are redone, not good
    total = ended - created
    assert sum(truth.values()) == pytest.approx(total, abs=0.05)  # the script's own bookkeeping
    got = ledger["seconds"]
    counted = sum(got.values())
    shares = {cause: 100 * got.get(cause, 0.0) / counted for cause in truth}
    true_shares = {cause: 100 * seconds / total for cause, seconds in truth.items()}
    errors = {cause: round(shares[cause] - true_shares[cause], 2) for cause in truth}
    print("truth seconds", {k: round(v, 2) for k, v in truth.items()}, "ledger", got)
    print("error in percentage points", errors, "ledger", ledger)
    assert all(abs(e) <= TOLERANCE for e in errors.values()), (errors, truth, got)
    assert abs(ledger["percent"] - true_shares["good"]) <= TOLERANCE + 0.5
    assert abs(counted - total) <= 0.05 * total, (counted, total)
    assert ended - created < 60, "the scripted run is under a minute"
    printed = cluster.kubectl("get", "tj", "good", "-n", ns).stdout
    assert "GOODPUT" in printed and ledger["summary"] in printed
