"""The worker guard's decisions (``worker/guard.py``) on the in-memory runs backend.

No SQL, no Redis, no sleeping: ``MemoryRuns`` and the guard share a fake clock that ``sleep``
moves on. Both topologies are covered: claims that are the tracking rows (the store) and claims
kept apart from tracking (Redis), with ``MemoryRuns`` standing in for each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence

import pytest

from celery_durable_beat.exceptions import StoreUnavailable
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Action, Trigger
from celery_durable_beat.runs.base import RunKey, Runs, RunState, RunWrite
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.settings import Settings
from celery_durable_beat.worker.guard import LIMIT_SHARE, GiveBack, GuardRuntime, Refused
from celery_durable_beat.worker.tracker import CIRCUIT_S

from ._support import FakeClock

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000
KEY = RunKey(tick_task_id("Nightly", T0), "Nightly", T0, Trigger.AUTO.value)


class Flaky(MemoryRuns):
    """``MemoryRuns`` that raises, as a backend that does not answer, while ``down``."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("the test took it down")

    def claim(
        self, key: RunKey, owner: str, attempt: int, ttl_ms: int, settles: Sequence[RunWrite] = ()
    ) -> RunState | None:
        self._check()
        return super().claim(key, owner, attempt, ttl_ms, settles)

    def settle_many(self, writes: Sequence[RunWrite]) -> None:
        self._check()
        super().settle_many(writes)

    def settle(self, write: RunWrite) -> bool:
        self._check()
        return super().settle(write)

    def write(self, writes: Sequence[RunWrite]) -> None:
        self._check()
        super().write(writes)

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        self._check()
        super().heartbeat(held, ttl_ms)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(clock: FakeClock) -> Iterator[Callable[..., GuardRuntime]]:
    """``make(claims, tracking=None, sleep=None)``: a runtime, closed after the test."""
    made: list[GuardRuntime] = []

    def build(
        claims: MemoryRuns,
        tracking: MemoryRuns | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> GuardRuntime:
        settings = Settings(run_ttl=3, dedup_ttl=60)
        runs = Runs(claims=claims, tracking=tracking or claims)
        # Deferred ends wait for the next claim, a flush, a heartbeat or close: never for the
        # sender thread's real-time timer, which would race the assertions.
        runtime = GuardRuntime(
            settings, runs, clock=clock, sleep=sleep or clock.sleep, settle_gather_s=3600
        )
        made.append(runtime)
        return runtime

    yield build
    for runtime in made:
        runtime.close()


def enter(runtime: GuardRuntime, attempt: int = 0, redelivered: bool = False) -> object:
    return runtime.enter(KEY, hostname="w", attempt=attempt, redelivered=redelivered)


def test_a_claimed_tick_runs_and_its_end_is_recorded(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    runs = MemoryRuns(clock)
    runtime = make(runs)
    held = runtime.enter(KEY, hostname="w", attempt=0, redelivered=False)
    assert held.claimed and runs.state(KEY.task_id) is RunState.STARTED
    runtime.leave(held, RunState.SUCCEEDED)
    runtime.flush()  # an end is written soon, not waited for
    record = runs.get_run(KEY.task_id)
    assert record is not None and record.state is RunState.SUCCEEDED
    assert record.owner == held.owner and record.expires_at_ms == T0 + 60_000
    assert runtime.counters == {"claimed": 1}


def test_a_duplicate_is_refused_and_counted(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    runs = MemoryRuns(clock)
    runtime = make(runs)
    enter(runtime)
    with pytest.raises(Refused) as refused:
        enter(runtime)
    assert refused.value.state is RunState.STARTED
    assert runtime.counters["duplicates_refused"] == 1
    assert runs.counters() == {"duplicates_refused": 1}  # the shared counter


def test_a_redelivery_waits_for_a_dead_run_and_then_runs(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    runs = MemoryRuns(clock)
    runs.claim(KEY, "dead-worker", 0, 3000)  # started, then its worker died: no heartbeat
    held = enter(make(runs), redelivered=True)
    assert clock.ms - T0 > 3000  # it waited out the dead run's claim
    assert runs.state(KEY.task_id) is RunState.STARTED and held is not None


def test_a_redelivery_facing_a_live_run_is_refused_after_waiting(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    runs = MemoryRuns(clock)
    runs.claim(KEY, "alive", 0, 3000)

    def sleep_while_it_heartbeats(seconds: float) -> None:
        clock.sleep(seconds)
        runs.heartbeat([(KEY.task_id, "alive")], 3000)

    with pytest.raises(Refused):
        enter(make(runs, sleep=sleep_while_it_heartbeats), redelivered=True)
    assert clock.ms - T0 >= 4000  # run_ttl + 1 s


def test_a_redelivery_with_a_time_limit_waits_a_share_of_it_then_gives_its_message_back(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    """run_ttl 3 s, limit 2 s: it waits 0.5 s, not 4 s, and leaves the live claim alone."""
    runs = MemoryRuns(clock)
    runs.claim(KEY, "dead-worker", 0, 3000)
    with pytest.raises(GiveBack) as gave_back:
        make(runs).enter(KEY, hostname="w", attempt=0, redelivered=True, time_limit_s=2)
    assert clock.ms - T0 == round(2 * LIMIT_SHARE * 1000)
    assert gave_back.value.waited_s == pytest.approx(2 * LIMIT_SHARE)
    record = runs.get_run(KEY.task_id)
    assert record is not None and (record.state, record.owner) == (RunState.STARTED, "dead-worker")


def test_a_limited_redelivery_that_got_the_claim_after_waiting_gives_it_back(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    """Part of its limit is spent: the next delivery, which finds the claim free, runs it."""
    runs = MemoryRuns(clock)
    runs.claim(KEY, "dead-worker", 0, 300)  # expires while the copy waits
    with pytest.raises(GiveBack):
        make(runs).enter(KEY, hostname="w", attempt=0, redelivered=True, time_limit_s=4)
    assert clock.ms - T0 < 1000
    held = enter(make(runs), redelivered=True)  # the requeued copy: claims at once
    assert held is not None and runs.state(KEY.task_id) is RunState.STARTED
    assert clock.ms - T0 < 1000


def test_a_limited_redelivery_finding_the_claim_free_runs_at_once(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    runs = MemoryRuns(clock)
    held = make(runs).enter(KEY, hostname="w", attempt=0, redelivered=True, time_limit_s=2)
    assert held.claimed and clock.ms == T0


def test_an_interrupted_wait_gives_the_message_back(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    """The soft time limit's exception, raised while the copy sleeps, ends nothing else."""

    class SoftLimit(Exception):
        pass

    def interrupted(seconds: float) -> None:
        raise SoftLimit

    runs = MemoryRuns(clock)
    runs.claim(KEY, "dead-worker", 0, 3000)
    runtime = make(runs, sleep=interrupted)
    with pytest.raises(GiveBack):
        runtime.enter(KEY, hostname="w", attempt=0, redelivered=True, interrupts=(SoftLimit,))


def test_a_first_delivery_with_a_time_limit_is_refused_as_before(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    """Not redelivered: a duplicate of a live run, refused at once, never requeued."""
    runs = MemoryRuns(clock)
    runs.claim(KEY, "alive", 0, 3000)
    with pytest.raises(Refused):
        make(runs).enter(KEY, hostname="w", attempt=0, redelivered=False, time_limit_s=2)
    assert clock.ms == T0


def test_a_redelivery_of_a_finished_run_is_refused_at_once(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    runs = MemoryRuns(clock)
    runs.claim(KEY, "w1", 0, 3000)
    runs.settle(RunWrite(KEY, RunState.FAILED, "w1", 60_000))
    with pytest.raises(Refused) as refused:
        enter(make(runs), redelivered=True)
    assert refused.value.state is RunState.FAILED and clock.ms == T0


def test_a_retry_claims_the_tick_and_a_copy_of_the_original_does_not(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    runs = MemoryRuns(clock)
    runtime = make(runs)
    held = runtime.enter(KEY, hostname="w", attempt=0, redelivered=False)
    runtime.retrying(held, delay_s=10)
    record = runs.get_run(KEY.task_id)
    assert record is not None and record.state is RunState.RETRIED
    assert record.expires_at_ms == T0 + 13_000  # the delay, then run_ttl
    with pytest.raises(Refused):
        enter(runtime, attempt=0)
    retry = runtime.enter(KEY, hostname="w", attempt=1, redelivered=False)
    runtime.leave(retry, RunState.SUCCEEDED)
    runtime.flush()
    assert runs.state(KEY.task_id) is RunState.SUCCEEDED


def test_a_retried_state_is_sent_even_while_the_claims_circuit_is_open(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    claims, tracking = Flaky(clock), MemoryRuns(clock)
    runtime = make(claims, tracking)
    held = runtime.enter(KEY, hostname="w", attempt=0, redelivered=False)
    claims.down = True
    other = RunKey(tick_task_id("Other", T0), "Other", T0, Trigger.AUTO.value)
    runtime.enter(other, hostname="w", attempt=0, redelivered=False)  # fails: circuit open
    claims.down = False  # back, but the circuit stays open for a while
    assert runtime.claim_circuit.open()
    runtime.retrying(held, delay_s=0)  # type: ignore[arg-type]
    assert claims.state(KEY.task_id) is RunState.RETRIED  # the retry may claim it at once


def test_a_requeued_run_gives_the_tick_back(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    runs = MemoryRuns(clock)
    runtime = make(runs)
    runtime.leave(runtime.enter(KEY, hostname="w", attempt=0, redelivered=False), None)
    assert runtime.enter(KEY, hostname="w", attempt=0, redelivered=False).claimed


def test_the_store_down_the_tick_runs_and_its_state_is_written_late(
    clock: FakeClock, make: Callable[..., GuardRuntime], caplog: pytest.LogCaptureFixture
) -> None:
    runs = Flaky(clock)
    runtime = make(runs)
    runs.down = True
    caplog.set_level(logging.INFO, logger="celery_durable_beat.worker")
    held = runtime.enter(KEY, hostname="w", attempt=0, redelivered=False)
    assert not held.claimed and runtime.counters["unclaimed"] == 1
    runtime.leave(held, RunState.SUCCEEDED)
    assert runs.get_run(KEY.task_id) is None  # kept in memory meanwhile
    runs.down = False
    runtime.heartbeat_once()
    assert runs.get_run(KEY.task_id) is None  # the circuit leaves the store alone 5 s
    clock.sleep(CIRCUIT_S)
    runtime.heartbeat_once()
    assert runs.state(KEY.task_id) is RunState.SUCCEEDED
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions == [Action.RUN_TRACKING_UNAVAILABLE.value, Action.RUN_TRACKING_RESTORED.value]


def test_claims_kept_apart_are_mirrored_into_tracking(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    claims, tracking = MemoryRuns(clock), MemoryRuns(clock)
    runtime = make(claims, tracking)
    held = runtime.enter(KEY, hostname="w", attempt=0, redelivered=False)
    assert claims.state(KEY.task_id) is tracking.state(KEY.task_id) is RunState.STARTED
    runtime.leave(held, RunState.SUCCEEDED)
    runtime.flush()
    assert claims.state(KEY.task_id) is tracking.state(KEY.task_id) is RunState.SUCCEEDED


def test_claims_apart_down_the_tick_runs_unchecked(
    clock: FakeClock, make: Callable[..., GuardRuntime], caplog: pytest.LogCaptureFixture
) -> None:
    claims, tracking = Flaky(clock), MemoryRuns(clock)
    claims.down = True
    runtime = make(claims, tracking)
    caplog.set_level(logging.INFO, logger="celery_durable_beat.worker")
    first = runtime.enter(KEY, hostname="w", attempt=0, redelivered=False)
    second = runtime.enter(KEY, hostname="w", attempt=0, redelivered=False)
    assert not first.claimed and not second.claimed  # fail open, both
    assert tracking.state(KEY.task_id) is RunState.UNKNOWN
    runtime.leave(first, RunState.SUCCEEDED)
    runtime.flush()
    assert tracking.state(KEY.task_id) is RunState.SUCCEEDED  # the row is first's: it wrote it
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions == [Action.DEDUP_UNAVAILABLE.value]


class Counting(MemoryRuns):
    """``MemoryRuns`` that counts the calls a backend round trip would be."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.calls: list[str] = []

    def claim(
        self, key: RunKey, owner: str, attempt: int, ttl_ms: int, settles: Sequence[RunWrite] = ()
    ) -> RunState | None:
        self.calls.append(f"claim+{len(settles)}")
        return super().claim(key, owner, attempt, ttl_ms, settles)

    def settle(self, write: RunWrite) -> bool:
        self.calls.append("settle")
        return super().settle(write)

    def settle_many(self, writes: Sequence[RunWrite]) -> None:
        self.calls.append(f"settle_many+{len(writes)}")
        super().settle_many(writes)


def test_a_run_end_travels_with_the_next_claim_in_one_call(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    claims, tracking = Counting(clock), MemoryRuns(clock)
    runtime = make(claims, tracking)
    second = RunKey(tick_task_id("Nightly", T0 + 1), "Nightly", T0 + 1, Trigger.AUTO.value)
    runtime.leave(enter(runtime), RunState.SUCCEEDED, acked=True)  # type: ignore[arg-type]
    assert claims.state(KEY.task_id) is RunState.STARTED  # not sent on its own
    runtime.enter(second, hostname="w", attempt=0, redelivered=False)
    assert claims.calls == ["claim+0", "claim+1"]
    assert claims.state(KEY.task_id) is RunState.SUCCEEDED


def test_a_deferred_end_is_sent_before_a_duplicate_is_claimed(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    claims, tracking = Counting(clock), MemoryRuns(clock)
    runtime = make(claims, tracking)
    runtime.leave(enter(runtime), RunState.SUCCEEDED, acked=True)  # type: ignore[arg-type]
    with pytest.raises(Refused) as refused:
        enter(runtime, redelivered=True)  # applied first: no wait for a run that ended
    assert refused.value.state is RunState.SUCCEEDED
    assert clock.ms == T0


def test_an_acks_late_runs_end_is_sent_before_leave_returns(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    """Its message is acknowledged after: a worker killed in between must leave it finished."""
    claims, tracking = Counting(clock), MemoryRuns(clock)
    runtime = make(claims, tracking)
    runtime.leave(enter(runtime), RunState.SUCCEEDED)  # type: ignore[arg-type]
    assert claims.calls == ["claim+0", "settle"]
    assert claims.state(KEY.task_id) is RunState.SUCCEEDED


def test_a_retried_state_and_a_give_back_are_sent_at_once(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    claims, tracking = Counting(clock), MemoryRuns(clock)
    runtime = make(claims, tracking)
    runtime.retrying(enter(runtime), delay_s=0)  # type: ignore[arg-type]
    assert claims.state(KEY.task_id) is RunState.RETRIED and claims.calls[-1] == "settle"
    runtime.leave(runtime.enter(KEY, hostname="w", attempt=1, redelivered=False), None)
    assert claims.state(KEY.task_id) is None  # given back: the requeued copy may claim it


def test_a_deferred_end_is_sent_by_the_sender_thread_within_its_gather_time(
    clock: FakeClock,
) -> None:
    claims, tracking = MemoryRuns(clock), MemoryRuns(clock)
    settings = Settings(run_ttl=3, dedup_ttl=60)
    runtime = GuardRuntime(
        settings, Runs(claims, tracking), clock=clock, sleep=clock.sleep, settle_gather_s=0.01
    )
    try:
        runtime.leave(enter(runtime), RunState.SUCCEEDED, acked=True)  # type: ignore[arg-type]
        deadline = time.monotonic() + 10
        while claims.state(KEY.task_id) is not RunState.SUCCEEDED:
            assert time.monotonic() < deadline, "the sender thread never sent the end"
            time.sleep(0.005)  # a poll on a deadline
    finally:
        runtime.close()


def test_deferred_ends_are_sent_by_the_heartbeat_and_on_close(
    clock: FakeClock, make: Callable[..., GuardRuntime]
) -> None:
    claims, tracking = Counting(clock), MemoryRuns(clock)
    runtime = make(claims, tracking)
    runtime.leave(enter(runtime), RunState.SUCCEEDED, acked=True)  # type: ignore[arg-type]
    runtime.heartbeat_once()
    assert claims.state(KEY.task_id) is RunState.SUCCEEDED
    assert "settle_many+1" in claims.calls
    other = RunKey(tick_task_id("Nightly", T0 + 1), "Nightly", T0 + 1, Trigger.AUTO.value)
    runtime.leave(runtime.enter(other, "w", 0, False), RunState.FAILED, acked=True)
    runtime.close()
    assert claims.state(other.task_id) is RunState.FAILED


@pytest.mark.parametrize("apart", [False, True], ids=["claims in tracking", "claims apart"])
def test_one_runtime_guards_several_namespaces_ticks_each_in_its_own(
    clock: FakeClock, make: Callable[..., GuardRuntime], apart: bool
) -> None:
    """SPEC §16: a worker whose app has no namespace runs alpha's and beta's ticks of one
    schedule name and instant once each, refuses a duplicate of each, and writes each run where
    that namespace's beat reads it."""
    tracking = MemoryRuns(clock)
    runtime = make(MemoryRuns(clock) if apart else tracking, tracking)
    keys = [
        RunKey(tick_task_id("Nightly", T0, ns), "Nightly", T0, Trigger.AUTO.value)
        for ns in ("alpha", "beta")
    ]
    held = [runtime.enter(k, hostname="w", attempt=0, redelivered=False) for k in keys]
    for k in keys:
        with pytest.raises(Refused):
            runtime.enter(k, hostname="w", attempt=0, redelivered=False)
    for h in held:
        runtime.leave(h, RunState.SUCCEEDED)
    runtime.flush()
    assert runtime.counters == {"claimed": 2, "duplicates_refused": 2}
    for k, ns, other in ((keys[0], "alpha", "beta"), (keys[1], "beta", "alpha")):
        record = tracking.in_namespace(ns).get_run(k.task_id)
        assert record is not None and record.state is RunState.SUCCEEDED
        assert record.namespace == ns
        assert tracking.in_namespace(other).get_run(k.task_id) is None
        assert tracking.get_run(k.task_id) is None  # the worker's own namespace: none of them
