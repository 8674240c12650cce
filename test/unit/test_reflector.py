"""The reflector's run loop on a fake clock: when it lists and watches after 410 Gone and errors.

The client is a stand-in with scripted list and watch outcomes (no server); time is a FakeClock,
so the backoff delays are exact and nothing sleeps for real. Each test asserts the fake times at
which the reflector listed or watched.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from testbed import wait_until

from controller.backoff import Backoff
from controller.cache.reflector import Reflector
from controller.clock import FakeClock
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import WatchEvent
from controller.rest.errors import ApiError
from controller.rest.resources import CONFIGMAPS

GONE = ApiError(410, {"reason": "Expired", "message": "too old resource version"})


SILENCE = "silence"


class FakeWatch:
    """Yields queued events until told to end (None), to end for silence (SILENCE) or to raise,
    or until stopped."""

    def __init__(self) -> None:
        self.events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.timed_out = False

    def __iter__(self) -> Iterator[WatchEvent]:
        while True:
            item = self.events.get()
            if item is None:
                return
            if item == SILENCE:
                self.timed_out = True
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def stop(self) -> None:
        self.events.put(None)


class FakeClient:
    """Scripted outcomes for list and watch, recording the fake time of every call.

    `lists`/`watches` are consumed in order (the last entry repeats): for a list, an exception to
    raise or a resourceVersion to return; for a watch, an exception to raise at the request, or a
    FakeWatch to return."""

    def __init__(self, clock: FakeClock, lists: list[Any], watches: list[Any]) -> None:
        self.clock = clock
        self.metrics = ControllerMetrics()
        self._lists, self._watches = lists, watches
        self.list_times: list[float] = []
        self.watch_times: list[float] = []
        self.lock = threading.Lock()

    @staticmethod
    def _next(script: list[Any]) -> Any:
        return script.pop(0) if len(script) > 1 else script[0]

    def list(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        with self.lock:
            self.list_times.append(self.clock.now())
            outcome = self._next(self._lists)
        if isinstance(outcome, BaseException):
            raise outcome
        return {"metadata": {"resourceVersion": outcome}, "items": []}

    def watch(self, *args: Any, **kwargs: Any) -> FakeWatch:
        with self.lock:
            self.watch_times.append(self.clock.now())
            outcome = self._next(self._watches)
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, FakeWatch)
        return outcome

    def calls(self) -> tuple[int, int]:
        with self.lock:
            return len(self.list_times), len(self.watch_times)


class Sink:
    def __init__(self) -> None:
        self.replaced: list[str] = []

    def replace(self, objs: list[Any], resource_version: str) -> None:
        self.replaced.append(resource_version)

    def add(self, obj: dict[str, Any]) -> None:
        pass

    update = delete = add


class Run:
    """A reflector running in a thread on a fake clock, with an unjittered backoff."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.clock = FakeClock(start=0.0)
        self.client = FakeClient(self.clock, lists, watches)
        self.sink = Sink()
        self.reflector = Reflector(
            self.client,  # type: ignore[arg-type]
            CONFIGMAPS,
            self.sink,
            clock=self.clock,
            backoff=Backoff(jitter=0, clock=self.clock),
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.reflector.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> Run:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.reflector.stop()
        self.thread.join(5)
        assert not self.thread.is_alive()

    def settle(self) -> tuple[int, int]:
        """Wait until the reflector is parked (sleeping on the fake clock or inside a watch) and
        its call counts stopped moving; return them."""
        last = (-1, -1)
        for _ in range(100):
            wait_until(lambda: self.clock.has_waiters() or self._in_watch(), 5, interval=0.01)
            now = self.client.calls()
            if now == last:
                return now
            last = now
            threading.Event().wait(0.05)
        raise AssertionError(f"reflector never settled: {last}")

    def _in_watch(self) -> bool:
        return self.reflector._watch is not None

    def advance(self, seconds: float) -> tuple[int, int]:
        self.clock.step(seconds)
        return self.settle()


def test_relist_after_410_waits_for_the_backoff() -> None:
    # every watch request is answered 410: list, 410, wait 0.8, list, 410, wait 1.6, list ...
    with Run(lists=["10"], watches=[GONE]) as run:
        assert run.settle() == (1, 1)
        assert run.advance(0.79) == (1, 1)  # no relist before the backoff has passed
        assert run.advance(0.02) == (2, 2)
        assert run.advance(1.5) == (2, 2)
        assert run.advance(0.11) == (3, 3)
        assert run.client.list_times == pytest.approx([0.0, 0.81, 2.42])


def test_relist_after_410_event_from_a_long_healthy_watch_uses_the_reset_backoff() -> None:
    # two failed lists grow the backoff; a watch then stays healthy for 5 min and ends with an
    # ERROR 410 event: the relist comes after the initial delay again (reset after 2 min quiet)
    healthy = FakeWatch()
    with Run(lists=[ConnectionError("refused"), ConnectionError("refused"), "10"], watches=[healthy]) as run:
        assert run.settle() == (1, 0)
        assert run.advance(0.8) == (2, 0)
        assert run.advance(1.6) == (3, 1)
        run.clock.step(300)
        healthy.events.put(WatchEvent("ERROR", {"code": 410, "reason": "Expired", "message": "too old"}))
        assert run.settle() == (3, 1)  # parked in the backoff, not relisting at once
        assert run.advance(0.79) == (3, 1)
        assert run.advance(0.02) == (4, 2)
        assert run.sink.replaced == ["10", "10"]


def test_watch_errors_back_off_and_rewatch_without_relisting() -> None:
    with Run(
        lists=["10"], watches=[ConnectionError("refused"), ConnectionError("refused"), FakeWatch()]
    ) as run:
        assert run.settle() == (1, 1)
        assert run.advance(0.8) == (1, 2)
        assert run.advance(1.59) == (1, 2)
        assert run.advance(0.02) == (1, 3)


def test_a_watch_that_ends_normally_is_resumed_at_once() -> None:
    first, second = FakeWatch(), FakeWatch()
    with Run(lists=["10"], watches=[first, second]) as run:
        assert run.settle() == (1, 1)
        run.clock.step(400)  # the server's timeoutSeconds passed
        first.events.put(WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "12"}}))
        first.events.put(None)
        assert run.settle() == (1, 2)
        assert run.client.watch_times == pytest.approx([0.0, 400.0])
        assert run.reflector.last_sync_resource_version == "12"


def test_a_watch_dropped_for_silence_is_resumed_at_once_without_relisting() -> None:
    # an idle resource type: no event, no bookmark, until the client's read timeout drops it
    first, second = FakeWatch(), FakeWatch()
    with Run(lists=["10"], watches=[first, second]) as run:
        assert run.settle() == (1, 1)
        run.clock.step(120)
        first.events.put(SILENCE)
        assert run.settle() == (1, 2)
        assert run.client.watch_times == pytest.approx([0.0, 120.0])
        assert run.reflector.last_sync_resource_version == "10"
