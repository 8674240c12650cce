"""One leader at a time, and a clean stop: the leader elector's deadline and write fence, the
RESTClient refusing fenced writes, a stopping Controller taking no new keys, and lease timings
checked when the flags are parsed."""

from __future__ import annotations

import copy
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import pytest
import urllib3

from controller.clock import FakeClock
from controller.cmd.options import parse
from controller.leaderelection import LeaderElectionConfig, LeaderElector
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.config import ClusterConfig
from controller.rest.errors import ApiError, LeadershipLostError
from controller.rest.resources import LEASES, PODS
from controller.runtime import Controller, Result
from controller.workqueue import RateLimitingQueue, default_controller_rate_limiter

# -- the leader elector --------------------------------------------------------------------------


class FakeLeaseAPI:
    """A Lease store answering the elector's get/create/update; records every call's options.

    With `hang` set, every call blocks for its whole `timeout` (30 s if none) and then fails, as
    a call to an API server that stopped answering would.
    """

    def __init__(self) -> None:
        self.metrics = ControllerMetrics()
        self.lease: dict[str, Any] | None = None
        self.calls: list[dict[str, Any]] = []
        self.renewed = threading.Event()
        self.hang = threading.Event()
        self.fence: LeaderElector | None = None  # whose fence to note at each write
        self._rv = 0

    def _call(self, verb: str, kw: dict[str, Any]) -> None:
        self.calls.append({"verb": verb, **kw})
        if self.hang.is_set():
            time.sleep(kw.get("timeout") or 30.0)
            raise TimeoutError(f"{verb}: no answer")

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self._rv)
        self.lease = stored
        self.renewed.set()
        return copy.deepcopy(stored)

    def get(self, res: Any, name: str, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        self._call("get", kw)
        if self.lease is None:
            raise ApiError(404, {"reason": "NotFound"})
        return copy.deepcopy(self.lease)

    def create(self, res: Any, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        self._call("create", kw)
        return self._store(obj)

    def update(self, res: Any, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        kw["fence_open"] = self.fence.may_write() if self.fence else None
        kw["holder"] = obj["spec"]["holderIdentity"]
        self._call("update", kw)
        assert self.lease is not None
        if obj["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise ApiError(409, {"reason": "Conflict"})
        return self._store(obj)


class Candidate:
    """One elector on a fake API, run in a thread; records when it stopped leading."""

    def __init__(
        self, api: FakeLeaseAPI, timing: tuple[float, float, float], clock: FakeClock | None = None
    ) -> None:
        self.stopped_leading = threading.Event()
        lease, renew, retry = timing
        config = LeaderElectionConfig(
            "lease", "ns", "me", lease, renew, retry, on_stopped_leading=self.stopped_leading.set
        )
        client = cast(RESTClient, api)
        self.elector = LeaderElector(client, config, clock=clock) if clock else LeaderElector(client, config)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.elector.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def wait_leading(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.elector.is_leader:
            assert time.monotonic() < deadline, "never became leader"
            time.sleep(0.01)


def test_a_frozen_leader_sends_nothing_once_its_deadline_has_passed() -> None:
    api, clock = FakeLeaseAPI(), FakeClock()
    me = Candidate(api, (4.0, 3.0, 0.1), clock)
    me.wait_leading()
    assert me.elector.may_write()
    api.renewed.clear()
    assert api.renewed.wait(2), "the leader renews"
    clock.step(2.9)  # as if the process had been stopped (SIGSTOP) for 2.9 s after a renewal
    assert me.elector.may_write()
    api.renewed.clear()
    assert api.renewed.wait(2)
    # it renewed meanwhile, at the stepped time: the deadline moved on
    clock.step(3.0)  # frozen right after that renewal, for the whole renew deadline
    calls = len(api.calls)
    assert not me.elector.may_write(), "the fence closes on time alone, before the elector wakes"
    assert me.stopped_leading.wait(2), "the elector gives up when it wakes"
    assert not me.elector.is_leader
    assert api.calls[calls:] == [], "not even a Lease call after the deadline"
    for call in api.calls:
        assert call["attempts"] == 1 and 0 < call["timeout"] <= 3.0, call
        if call["verb"] != "get":
            assert call["fenced"] is False, "the elector's own Lease writes bypass the fence"


def held_by(holder: str, duration: int) -> dict[str, Any]:
    """A Lease another replica holds, as the API server would return it."""
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "leaseTransitions": 0}
    return {"metadata": {"name": "lease", "namespace": "ns", "resourceVersion": "1"}, "spec": spec}


def test_a_candidate_waits_out_the_holders_lease_duration_not_its_own() -> None:
    api, clock = FakeLeaseAPI(), FakeClock()
    api.lease = held_by("other", 30)  # the holder's 30 s lease; this candidate's own is 4 s
    me = Candidate(api, (4.0, 3.0, 0.1), clock)
    while not api.calls:
        time.sleep(0.01)
    clock.step(20)  # unchanged for 20 s on our clock: past our lease, not past the holder's
    time.sleep(0.5)  # several looks (every 0.1 s)
    assert not me.elector.is_leader and api.lease["spec"]["holderIdentity"] == "other"
    clock.step(10.1)
    me.wait_leading()
    me.stop.set()


def test_a_candidate_looks_again_just_after_the_observed_lease_runs_out() -> None:
    clock = FakeClock()
    config = LeaderElectionConfig("lease", "ns", "me", 15.0, 10.0, 2.0)
    elector = LeaderElector(cast(RESTClient, FakeLeaseAPI()), config, clock=clock)
    assert 2.0 <= elector._next_look() <= 2.4  # nothing observed: the jittered retry period
    elector._observe(held_by("other", 15))
    assert 2.0 <= elector._next_look() <= 2.4  # a fresh record: its expiry is 15 s away
    clock.step(14.0)
    assert elector._next_look() == pytest.approx(1.0 + 0.05)  # the expiry comes first
    clock.step(1.0)
    assert elector._next_look() == pytest.approx(0.05)
    elector._observe(held_by("", 15))  # released: nobody's lease to wait for
    assert 2.0 <= elector._next_look() <= 2.4


def test_a_renewal_against_a_hanging_api_server_ends_within_the_renew_deadline() -> None:
    api = FakeLeaseAPI()
    me = Candidate(api, (3.0, 2.0, 0.2))
    me.wait_leading()
    api.renewed.clear()
    assert api.renewed.wait(2)
    hung_at = time.monotonic()  # the last renewal started before this
    api.hang.set()
    assert me.stopped_leading.wait(10)
    gave_up_after = time.monotonic() - hung_at
    assert gave_up_after <= 2.0 + 0.5, f"leadership outlasted the renew deadline: {gave_up_after:.2f}s"
    assert not me.elector.may_write()
    hung = [c for c in api.calls if c["verb"] == "get"][-1]
    assert hung["attempts"] == 1 and hung["timeout"] <= 2.0, "a single try, bounded by the time left"


def test_stopping_closes_the_fence_and_then_releases_the_lease() -> None:
    api = FakeLeaseAPI()
    me = Candidate(api, (4.0, 3.0, 0.1))
    api.fence = me.elector
    me.wait_leading()
    me.stop.set()
    me.thread.join(5)
    assert not me.thread.is_alive()
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == ""
    (release,) = [c for c in api.calls if c["verb"] == "update" and c["holder"] == ""]
    assert release["fence_open"] is False, "no write of ours may overtake the release"


# -- the RESTClient's write fence ----------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fenced_client(fence_open: bool) -> RESTClient:
    config = ClusterConfig(
        host=f"http://127.0.0.1:{closed_port()}"
    )  # nothing listens: any send fails to connect
    return RESTClient(config, max_attempts=1, metrics=ControllerMetrics(), write_fence=lambda: fence_open)


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}


@pytest.mark.parametrize(
    "write",
    [
        lambda c: c.create(PODS, POD),
        lambda c: c.update(PODS, POD),
        lambda c: c.patch(PODS, "p", {"metadata": {"labels": {"a": "b"}}}, "ns"),
        lambda c: c.delete(PODS, "p", "ns"),
    ],
    ids=["create", "update", "patch", "delete"],
)
def test_a_closed_fence_refuses_every_write_and_sends_nothing(write: Any) -> None:
    client = fenced_client(fence_open=False)
    with pytest.raises(LeadershipLostError):
        write(client)
    sent = [
        s for m in client.metrics.registry.collect() if m.name == "rest_client_requests" for s in m.samples
    ]
    assert sent == [], "nothing reached the network"


def test_reads_and_the_electors_own_lease_writes_pass_a_closed_fence() -> None:
    client = fenced_client(fence_open=False)
    lease = {"metadata": {"name": "l", "namespace": "ns"}, "spec": {}}
    calls: list[Callable[[], object]] = [
        lambda: client.get(PODS, "p", "ns"),
        lambda: client.list(PODS, "ns"),
        lambda: client.update(LEASES, lease, fenced=False),
    ]
    for call in calls:
        with pytest.raises(urllib3.exceptions.NewConnectionError):
            call()  # sent, and failed to connect: not refused by the fence


def test_an_open_fence_lets_writes_through() -> None:
    client = fenced_client(fence_open=True)
    with pytest.raises(urllib3.exceptions.NewConnectionError):
        client.create(PODS, POD)


def test_a_single_attempt_is_not_retried() -> None:
    client = fenced_client(fence_open=True)
    client.max_attempts = 5
    with pytest.raises(urllib3.exceptions.NewConnectionError):
        client.get(PODS, "p", "ns", attempts=1, timeout=1.0)
    labels = {"verb": "get", "resource": PODS.key}
    assert client.metrics.registry.get_sample_value("rest_client_retries_total", labels) in (None, 0.0)
    assert (
        client.metrics.registry.get_sample_value("rest_client_requests_total", {**labels, "code": "<error>"})
        == 1
    )


# -- the Controller's shutdown -------------------------------------------------------------------


class BlockingReconciler:
    """Holds the first key until released; records every key it was handed."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished: list[str] = []

    def reconcile(self, key: str) -> Result | None:
        self.seen.append(key)
        self.started.set()
        self.release.wait(5)
        self.finished.append(key)
        return None


def test_a_stopping_controller_finishes_what_it_holds_and_takes_no_new_key() -> None:
    rec = BlockingReconciler()
    queue: RateLimitingQueue[str] = RateLimitingQueue(default_controller_rate_limiter())
    ctrl = Controller("test", rec, queue, threadiness=1, metrics=ControllerMetrics())
    ctrl.enqueue("a")
    ctrl.run()
    assert rec.started.wait(5)
    ctrl.enqueue("b")
    ctrl.enqueue("c")
    closer = threading.Thread(target=ctrl.shutdown, args=(5.0,))
    closer.start()
    while not queue.shutting_down():
        time.sleep(0.005)
    time.sleep(0.05)
    assert closer.is_alive(), "shutdown waits for the reconcile in flight"
    rec.release.set()
    closer.join(5)
    assert not closer.is_alive()
    assert rec.seen == ["a"], "queued keys are left for the next leader"
    assert rec.finished == ["a"], "the key in flight finished"


# -- the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "timing",
    [
        ("15", "10", "9"),  # a jittered retry (× 1.2) would not fit in the renew deadline
        ("10", "10", "2"),  # the deadline must end before the lease does
        ("5", "10", "2"),
    ],
)
def test_inconsistent_lease_timings_exit_with_one_line(
    timing: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    lease, renew, retry = timing
    with pytest.raises(SystemExit) as exited:
        parse(
            [
                "--leader-elect",
                "--leader-elect-lease-duration",
                lease,
                "--leader-elect-renew-deadline",
                renew,
                "--leader-elect-retry-period",
                retry,
            ]
        )
    assert exited.value.code not in (0, None)
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert "--leader-elect-renew-deadline" in err


def test_short_lease_timings_and_an_identity_are_accepted() -> None:
    opts = parse(
        [
            "--leader-elect",
            "--leader-elect-identity",
            "alpha",
            "--leader-elect-lease-duration",
            "4",
            "--leader-elect-renew-deadline",
            "3",
            "--leader-elect-retry-period",
            "0.5",
        ]
    )
    assert (opts.lease_duration, opts.renew_deadline, opts.retry_period) == (4.0, 3.0, 0.5)
    assert opts.leader_elect_identity == "alpha"
    LeaderElectionConfig("l", "ns", "alpha", opts.lease_duration, opts.renew_deadline, opts.retry_period)


STARTUP_FAILS = """
import sys, threading
import controller.cmd.main as m

class CachesNeverSync:  # stands in for App: its start-up fails as a missing CRD's would
    def __init__(self, opts, metrics):
        self.synced = threading.Event()

    def start_caches(self, stop):
        pass  # they never sync

    def run(self, stop):
        raise RuntimeError("caches did not sync within 300s: torchrunjobs")

    def progress_endpoint(self, accepting):
        return None

    def shutdown(self):
        pass

m.App = CachesNeverSync
sys.exit(m.main(["--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"]))
"""


def test_a_failed_start_up_exits_non_zero_with_one_line() -> None:
    # its own process: main() installs signal handlers and configures logging for good
    proc = subprocess.run(
        [sys.executable, "-c", STARTUP_FAILS], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert "start-up failed" in line and "caches did not sync" in line
