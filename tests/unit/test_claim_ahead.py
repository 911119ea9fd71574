"""Claims taken ahead by the worker's main process (``worker/ahead.py``) and adopted by the run
(``GuardRuntime.adopt``), on the in-memory runs backend.

The event loop is a stand-in with the two calls ``ClaimAhead`` makes of Kombu's hub
(``add_reader``, ``remove_reader``); the test turns it by calling the registered reader once
the socket is readable. Requests are stand-ins with the attributes Celery's ``Request`` has
that the module reads or replaces.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery.app.trace import ExceptionInfo
from celery.exceptions import Ignore, Reject, Retry

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import HEADER_SCHEDULE, HEADER_TICK_MS, HEADER_TRIGGER
from celery_durable_beat.runs.base import RunKey, Runs, RunState
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.settings import Settings
from celery_durable_beat.worker.ahead import AHEAD_KEY, ClaimAhead, EndHere, wanted_for
from celery_durable_beat.worker.guard import Ahead, GuardRuntime, Refused

from ._support import FakeClock

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000
MINUTE = 60_000


def key(i: int) -> RunKey:
    return RunKey(tick_task_id("Nightly", T0 + i * MINUTE), "Nightly", T0 + i * MINUTE, "auto")


class Hub:
    """Kombu's hub as ``ClaimAhead`` uses it: one reader, run by ``turn``."""

    def __init__(self) -> None:
        self.readers: dict[Any, Callable[[], None]] = {}

    def add_reader(self, sock: Any, callback: Callable[[], None]) -> None:
        self.readers[sock] = callback

    def remove_reader(self, sock: Any) -> None:
        self.readers.pop(sock)

    def turn(self, timeout: float = 10.0) -> None:
        """Wait until a reader's socket is readable and run its callback (one loop turn)."""
        ready, _, _ = select.select(list(self.readers), [], [], timeout)
        assert ready, "the claims thread never woke the loop"
        for sock in ready:
            self.readers[sock]()


class Task:
    def __init__(self, acks_late: bool = False) -> None:
        self.acks_late = acks_late


class Request:
    """The parts of ``celery.worker.request.Request`` the module touches."""

    def __init__(self, i: int, *, acks_late: bool = False, redelivered: bool = False) -> None:
        k = key(i)
        self.id = k.task_id
        self.hostname = "w@host"
        self.task = Task(acks_late)
        self.delivery_info = {"redelivered": redelivered}
        self._request_dict: dict[str, Any] = {"id": k.task_id, "retries": 0}
        self._request_dict.update(
            {HEADER_SCHEDULE: "Nightly", HEADER_TICK_MS: k.tick_ms, HEADER_TRIGGER: "auto"}
        )
        self.calls: list[str] = []

    def on_success(self, failed__retval__runtime: Any, **_: Any) -> None:
        _failed, retval, _runtime = failed__retval__runtime
        exc = getattr(retval, "exception", None)
        exc = getattr(exc, "exc", exc)  # Celery unwraps billiard's ExceptionWithTraceback
        if isinstance(exc, Reject):
            self.reject(requeue=exc.requeue)
        elif not isinstance(exc, Retry):
            self.acknowledge()

    def acknowledge(self) -> None:
        self.calls.append("ack")

    def on_accepted(self, pid: int, time_accepted: float) -> None:
        self.calls.append("accepted")

    def reject(self, requeue: bool = False) -> None:
        self.calls.append(f"reject(requeue={requeue})")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rig(clock: FakeClock) -> Iterator[tuple[ClaimAhead, Hub, GuardRuntime, list[Any]]]:
    runs = MemoryRuns(clock)
    runtime = GuardRuntime(Settings(run_ttl=60, dedup_ttl=600), Runs(runs, runs), clock=clock)
    hub, forwarded = Hub(), []
    ahead = ClaimAhead(hub, forwarded.append, lambda: runtime)
    ahead.start()
    yield ahead, hub, runtime, forwarded
    ahead.stop()
    runtime.close()


def submit(ahead: ClaimAhead, runtime: GuardRuntime, request: Request) -> None:
    wanted = wanted_for(request, lambda: runtime, lambda task: True)
    assert wanted is not None
    ahead.submit(request, wanted)


def test_ticks_are_claimed_ahead_and_go_on_in_order_carrying_their_claim(rig: Any) -> None:
    ahead, hub, runtime, forwarded = rig
    requests = [Request(i) for i in range(5)]
    for request in requests:
        submit(ahead, runtime, request)
    while len(forwarded) < len(requests):
        hub.turn()
    assert forwarded == requests
    for i, request in enumerate(requests):
        owner, claimed_at_ms, ends_here = request._request_dict[AHEAD_KEY]
        assert owner.startswith("w@host:") and not ends_here
        assert claimed_at_ms == T0
        assert runtime.claims.state(key(i).task_id) is RunState.STARTED


def test_the_main_process_pushes_a_claim_on_until_a_pool_process_accepts_it(
    rig: Any, clock: FakeClock
) -> None:
    ahead, hub, runtime, _forwarded = rig
    request = Request(0)
    submit(ahead, runtime, request)
    hub.turn()
    owner = request._request_dict[AHEAD_KEY][0]
    assert [h.owner for h in runtime.held()] == [owner]
    clock.sleep(50)
    runtime.heartbeat_once()
    clock.sleep(50)  # 100 s after the claim, past run_ttl: still started, pushed on
    assert runtime.claims.state(key(0).task_id) is RunState.STARTED
    request.on_accepted(1234, 0.0)
    assert request.calls == ["accepted"] and runtime.held() == []


def test_a_refused_tick_goes_on_without_a_claim_so_the_pool_refuses_it(rig: Any) -> None:
    ahead, hub, runtime, forwarded = rig
    assert runtime.claims.claim(key(0), "another-worker", 0, MINUTE) is None
    request = Request(0)
    submit(ahead, runtime, request)
    hub.turn()
    assert forwarded == [request] and AHEAD_KEY not in request._request_dict


def test_ordinary_tasks_and_redelivered_ticks_are_not_claimed_ahead(rig: Any) -> None:
    _ahead, _hub, runtime, _forwarded = rig
    assert wanted_for(Request(0, redelivered=True), lambda: runtime, lambda task: True) is None
    assert wanted_for(Request(0), lambda: runtime, lambda task: False) is None  # not guarded
    ordinary = Request(0)
    ordinary._request_dict = {"id": "a-task", "retries": 0}
    assert wanted_for(ordinary, lambda: runtime, lambda task: True) is None


def test_the_run_adopts_a_fresh_claim_without_asking_the_backend(
    rig: Any, clock: FakeClock
) -> None:
    _ahead, _hub, runtime, _forwarded = rig
    owner = runtime.owner("w@host")
    assert runtime.claim_ahead([(key(0), owner, 0)]) == [None]
    calls = []
    runtime.claims.claim = lambda *a, **k: calls.append(a)  # type: ignore[method-assign]
    held = runtime.adopt(key(0), Ahead(owner, clock.now_ms()), "w@host", 0)
    assert held.claimed and held.owner == owner and not calls
    assert runtime.counters["claimed"] == 1


def test_a_claim_that_waited_long_is_confirmed_or_refused(rig: Any, clock: FakeClock) -> None:
    _ahead, _hub, runtime, _forwarded = rig
    mine, lost = runtime.owner("w@host"), runtime.owner("w@host")
    assert runtime.claim_ahead([(key(0), mine, 0), (key(1), lost, 0)]) == [None, None]
    claimed_at = clock.now_ms()
    clock.sleep(40)  # past half run_ttl: confirmed as the same owner
    assert runtime.adopt(key(0), Ahead(mine, claimed_at), "w@host", 0).owner == mine
    clock.sleep(30)  # past run_ttl: the claim expired, and a duplicate took it
    assert runtime.claims.claim(key(1), "duplicate", 0, MINUTE) is None
    with pytest.raises(Refused):
        runtime.adopt(key(1), Ahead(lost, claimed_at), "w@host", 0)


def test_stopping_drops_what_waits_and_gives_its_claims_back(rig: Any) -> None:
    ahead, _hub, runtime, forwarded = rig
    request = Request(0)
    submit(ahead, runtime, request)
    for _ in range(200):  # the claims thread answers; the loop is never turned
        if ahead._claimed:
            break
        select.select([], [], [], 0.01)
    assert runtime.claims.state(key(0).task_id) is RunState.STARTED
    ahead.stop()
    assert forwarded == []
    assert runtime.claims.state(key(0).task_id) is None  # given back: the next delivery claims


@pytest.mark.parametrize(
    ("outcome", "state", "then"),
    [
        ((0, "result", 0.1), RunState.SUCCEEDED, "ack"),
        ((1, "Ignore", 0.1), RunState.SUCCEEDED, "ack"),
        ((1, "RuntimeError", 0.1), RunState.FAILED, "ack"),
        ((1, "Reject", 0.1), RunState.FAILED, "reject(requeue=False)"),
        ((1, "Reject-requeue", 0.1), None, "reject(requeue=True)"),
        ((1, "Retry", 0.1), RunState.STARTED, None),
    ],
)
def test_an_acks_late_run_is_acknowledged_once_its_end_is_written(
    rig: Any, outcome: tuple[int, str, float], state: RunState | None, then: str | None
) -> None:
    ahead, hub, runtime, forwarded = rig
    request = Request(0, acks_late=True)
    submit(ahead, runtime, request)
    hub.turn()
    assert forwarded == [request]
    owner, _at, ends_here = request._request_dict[AHEAD_KEY]
    assert ends_here and isinstance(request.on_success, EndHere)
    failed, name, runtime_s = outcome
    request.on_success((failed, _retval(name), runtime_s))
    if then is not None:
        assert request.calls == []  # not before the end is written
        hub.turn()
    assert request.calls == ([then] if then else [])
    assert runtime.claims.state(key(0).task_id) is state
    record = runtime.runs.get_run(key(0).task_id)
    assert record is not None and record.owner == owner


def _retval(name: str) -> Any:
    exceptions: dict[str, BaseException] = {
        "Ignore": Ignore(),
        "RuntimeError": RuntimeError("boom"),
        "Reject": Reject("no", requeue=False),
        "Reject-requeue": Reject("again", requeue=True),
        "Retry": Retry("later"),
    }
    if name not in exceptions:
        return name
    try:
        raise exceptions[name]
    except BaseException:
        return ExceptionInfo()


def test_the_stand_in_hub_sees_a_socketpair_as_celery_does() -> None:
    """The stand-in's ``turn`` relies on select() over the module's socket (a sanity check)."""
    a, b = socket.socketpair()
    b.send(b"\0")
    assert select.select([a], [], [], 1)[0] == [a]
    a.close()
    b.close()


def test_an_unforeseen_error_in_a_claim_call_strands_no_tick(
    rig: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ahead, hub, runtime, forwarded = rig

    def broken(*_: Any) -> Any:
        raise RuntimeError("a bug, not an outage")

    runtime.claim_ahead = broken  # type: ignore[method-assign]
    request = Request(0)
    submit(ahead, runtime, request)
    hub.turn()
    assert forwarded == [request] and AHEAD_KEY not in request._request_dict
    assert any(getattr(r, "action", None) == "claim_ahead_failed" for r in caplog.records)


def test_a_tick_celery_could_not_take_gives_its_claim_back(clock: FakeClock) -> None:
    runs = MemoryRuns(clock)
    runtime = GuardRuntime(Settings(run_ttl=60, dedup_ttl=600), Runs(runs, runs), clock=clock)
    hub = Hub()

    def refuse(request: Any) -> None:
        raise RuntimeError("the pool is gone")

    ahead = ClaimAhead(hub, refuse, lambda: runtime)
    ahead.start()
    try:
        submit(ahead, runtime, Request(0))
        hub.turn()
        assert runtime.held() == []
        assert runtime.claims.state(key(0).task_id) is None  # the next delivery claims it
    finally:
        ahead.stop()
        runtime.close()
