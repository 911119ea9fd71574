"""A burst's rounds (``burst.py``) on the in-memory store: every tick once, each round's settle
on the settling thread beside the next claim, the gate's calls in round order, and failures of
a settle, of a claim beside it and of the broker each leaving what a single round would."""

from __future__ import annotations

import gc
import threading
from collections.abc import Collection, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any

import pytest

from celery_durable_beat.burst import BurstRounds
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.gates.base import NOTHING_LEARNT, PreviousRuns
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Outcome, Reason
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.store.base import Advance, AuditEvent, Claim, DueSchedule
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.sync import sync_definitions
from tests.support.stores import InjectedFault

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000
EPOCH = 1
BATCH = 4


class WatchedStore(MemoryStore):
    """The memory store, noting each claim's ``excluding`` and each settle's thread and rows;
    ``settle_fails_at`` / ``claim_fails_at`` make that call (1-based) raise."""

    def __init__(self, beside: bool = True) -> None:
        super().__init__(clock=lambda: T0 + 60_000)
        self.beside = beside
        self.excluded: list[frozenset[int]] = []
        self.settled: list[tuple[str, frozenset[int]]] = []
        self.settle_fails_at = 0
        self.claim_fails_at = 0

    @property
    def settles_beside_claims(self) -> bool:  # type: ignore[override]
        return self.beside

    def claim_due(
        self, now_ms: int, limit: int, excluding: Collection[int] = ()
    ) -> AbstractContextManager[Claim]:
        self.excluded.append(frozenset(excluding))
        if len(self.excluded) == self.claim_fails_at:
            raise InjectedFault("claim failed")
        return super().claim_due(now_ms, limit, excluding)

    def settle(
        self, events: Sequence[AuditEvent], advances: Sequence[Advance], epoch: int
    ) -> list[bool]:
        self.settled.append(
            (threading.current_thread().name, frozenset(a.schedule_id for a in advances))
        )
        if len(self.settled) == self.settle_fails_at:
            raise InjectedFault("settle failed")
        return super().settle(events, advances, epoch)


class CallOrder:
    """A gate that lets everything through and notes its calls in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def begin_round(self, schedules: Sequence[DueSchedule], now_ms: int) -> PreviousRuns:
        self.calls.append(("begin", frozenset(due.id for due in schedules)))
        return NOTHING_LEARNT

    def before_publish(self, due: DueSchedule, message: TickMessage) -> Reason | None:
        return None

    def after_settle(self, enqueued: Collection[str], published: Collection[str] = ()) -> None:
        self.calls.append(("after", (frozenset(enqueued), frozenset(published))))

    def close(self) -> None:
        return None


def _burst(
    store: WatchedStore, count: int, publisher: CapturingPublisher | None = None
) -> tuple[BurstRounds, CapturingPublisher, CallOrder]:
    entries = {f"s{i:03d}": {"task": "t", "schedule": "@every 60s"} for i in range(count)}
    sync_definitions(store, validate_entries(entries), T0)
    store.register_epoch(EPOCH)
    publisher = publisher or CapturingPublisher()
    gate = CallOrder()
    dispatcher = Dispatcher(store, publisher, batch_size=BATCH, gate=gate)
    return BurstRounds(dispatcher, store.now_ms), publisher, gate


@pytest.fixture
def store() -> WatchedStore:
    return WatchedStore()


def _enqueued(store: MemoryStore, count: int) -> list[str]:
    return [
        e.task_id or ""
        for i in range(count)
        for e in store.history(f"s{i:03d}", 10)
        if e.outcome is Outcome.ENQUEUED
    ]


def test_a_burst_fires_every_tick_once_settling_each_round_beside_the_next_claim(
    store: WatchedStore,
) -> None:
    bursts, publisher, gate = _burst(store, 3 * BATCH + 1)
    stats = bursts.run(T0 + 60_000, EPOCH, lambda: True)
    bursts.close()

    ids = [m.task_id for m in publisher.messages]
    assert len(ids) == len(set(ids)) == 3 * BATCH + 1
    assert sorted(_enqueued(store, 3 * BATCH + 1)) == sorted(ids)
    assert stats.claimed == 3 * BATCH + 1 and not stats.more_due
    assert stats.outcomes()["enqueued"] == 3 * BATCH + 1
    # Three full rounds settled on the settling thread, the last (one row) in the loop's own.
    threads = [name for name, _ in store.settled]
    assert [name.startswith("durable-beat-settle") for name in threads] == [1, 1, 1, 0]
    # Each claim beside a settle left out exactly the rows being settled.
    assert store.excluded[1:] == [rows for _, rows in store.settled[:3]]
    # The gate heard of each round's settle before the next round began.
    kinds = [kind for kind, _ in gate.calls]
    assert kinds == ["begin", "after"] * 4
    begun = [rows for kind, rows in gate.calls if kind == "begin"]
    assert begun == [rows for _, rows in store.settled]


def test_a_store_that_cannot_settle_beside_claims_settles_each_round_in_turn() -> None:
    store = WatchedStore(beside=False)
    bursts, publisher, _ = _burst(store, 2 * BATCH)
    stats = bursts.run(T0 + 60_000, EPOCH, lambda: True)
    # One round per call, settled in the caller's thread; the loop calls again at once.
    assert len(publisher.messages) == BATCH and stats.more_due
    assert [name for name, _ in store.settled] == [threading.current_thread().name]
    stats = bursts.run(T0 + 60_000, EPOCH, lambda: True)
    assert len(publisher.messages) == 2 * BATCH and stats.more_due
    assert store.excluded == [frozenset(), frozenset()]


def test_go_on_ends_the_burst_after_a_settled_round(store: WatchedStore) -> None:
    bursts, publisher, _ = _burst(store, 3 * BATCH)
    answers = iter([True, False])
    stats = bursts.run(T0 + 60_000, EPOCH, lambda: next(answers))
    bursts.close()
    assert stats.claimed == 2 * BATCH and stats.more_due  # the loop runs the rest next
    assert len(_enqueued(store, 3 * BATCH)) == len(publisher.messages) == 2 * BATCH


def test_a_failed_settle_fails_the_burst_and_the_round_beside_it_publishes_nothing(
    store: WatchedStore,
) -> None:
    bursts, publisher, gate = _burst(store, 3 * BATCH)
    store.settle_fails_at = 2
    with pytest.raises(InjectedFault, match="settle failed"):
        bursts.run(T0 + 60_000, EPOCH, lambda: True)
    bursts.close()
    # Round 1 recorded; round 2 published without records (replayed later under the same
    # ids); round 3 was claimed beside round 2's settle and never published.
    assert len(publisher.messages) == 2 * BATCH
    assert len(_enqueued(store, 3 * BATCH)) == BATCH
    assert len(store.excluded) == 3
    last = gate.calls[-1]
    assert last[0] == "after" and last[1][0] == frozenset()
    assert last[1][1] == {m.task_id for m in publisher.messages[BATCH:]}


def test_a_claim_failing_beside_a_settle_still_finishes_that_round(store: WatchedStore) -> None:
    bursts, publisher, gate = _burst(store, 3 * BATCH)
    store.claim_fails_at = 2
    with pytest.raises(InjectedFault, match="claim failed"):
        bursts.run(T0 + 60_000, EPOCH, lambda: True)
    bursts.close()
    assert len(publisher.messages) == BATCH
    assert sorted(_enqueued(store, 3 * BATCH)) == sorted(m.task_id for m in publisher.messages)
    assert gate.calls[-1][0] == "after" and len(gate.calls[-1][1][0]) == BATCH


def test_a_broker_outage_ends_the_burst_with_the_round_settled(store: WatchedStore) -> None:
    publisher = CapturingPublisher()
    bursts, _, _ = _burst(store, 3 * BATCH, publisher)
    publisher.fail_with = Reason.BROKER_UNAVAILABLE
    stats = bursts.run(T0 + 60_000, EPOCH, lambda: True)
    bursts.close()
    assert stats.broker_unavailable and stats.claimed == BATCH
    assert len(store.settled) == 1  # the failed round's records and its back-off advances
    assert store.history("s000", 10)[0].reason == Reason.BROKER_UNAVAILABLE.value


def test_nothing_due_is_an_empty_burst(store: WatchedStore) -> None:
    bursts, publisher, gate = _burst(store, 2)
    stats = bursts.run(T0, EPOCH, lambda: True)
    assert stats.claimed == 0 and not stats.more_due
    assert publisher.messages == [] and gate.calls == [] and store.settled == []
    bursts.close()
    bursts.close()  # idempotent


def test_a_publish_that_raises_abandons_its_round(store: WatchedStore) -> None:
    class Raising(CapturingPublisher):
        def publish(self, message: TickMessage) -> Reason | None:
            raise InjectedFault("publish raised")

    bursts, _, gate = _burst(store, BATCH, Raising())
    with pytest.raises(InjectedFault):
        bursts.run(T0 + 60_000, EPOCH, lambda: True)
    assert gate.calls[-1] == ("after", (frozenset(), frozenset()))
    assert store.settled == []


def test_a_failing_first_claim_raises_with_nothing_published(store: WatchedStore) -> None:
    bursts, publisher, gate = _burst(store, BATCH)
    store.claim_fails_at = 1
    with pytest.raises(InjectedFault):
        bursts.run(T0 + 60_000, EPOCH, lambda: True)
    assert publisher.messages == [] and gate.calls == [("after", (frozenset(), frozenset()))]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_is_paused_during_a_burst_and_left_as_it_was(
    store: WatchedStore, enabled: bool
) -> None:
    bursts, _, _ = _burst(store, 2 * BATCH + 1)
    seen: list[bool] = []
    real_claim = store.claim_due

    def noting_claim(*args: Any, **kwargs: Any) -> AbstractContextManager[Claim]:
        seen.append(gc.isenabled())
        return real_claim(*args, **kwargs)

    store.claim_due = noting_claim  # type: ignore[method-assign]
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        bursts.run(T0 + 60_000, EPOCH, lambda: True)
        assert gc.isenabled() is enabled
        store.claim_fails_at = len(store.excluded) + 1
        with pytest.raises(InjectedFault):
            bursts.run(T0 + 60_000, EPOCH, lambda: True)
        assert gc.isenabled() is enabled  # after a failure too
    finally:
        (gc.enable if was else gc.disable)()
        bursts.close()
    assert seen and not any(seen)


def test_without_a_settling_thread_each_round_settles_in_turn(store: WatchedStore) -> None:
    """A process at its thread limit (the pool starts its thread on first use): the round is
    settled in turn, the burst ends there, nothing is published twice and the gate hears of
    every round."""

    class NoThreads:
        def submit(self, *args: Any) -> Any:
            raise RuntimeError("can't start new thread")

        def shutdown(self, wait: bool = True) -> None:
            return None

    bursts, publisher, gate = _burst(store, 2 * BATCH)
    bursts._settler = NoThreads  # type: ignore[assignment, method-assign]
    for _ in range(2):
        stats = bursts.run(T0 + 60_000, EPOCH, lambda: True)
        assert stats.claimed == BATCH
    ids = [m.task_id for m in publisher.messages]
    assert len(ids) == len(set(ids)) == 2 * BATCH
    assert sorted(_enqueued(store, 2 * BATCH)) == sorted(ids)
    assert [kind for kind, _ in gate.calls] == ["begin", "after"] * 2


def test_an_interrupted_wait_still_lets_the_settle_decide_its_round(store: WatchedStore) -> None:
    """A KeyboardInterrupt while waiting for a settle: the settle is waited for and, as it
    committed, its round is finished (the gate told, ``finished`` counts it) before the
    interrupt goes on."""

    class Interrupted(Future):  # type: ignore[type-arg]
        def __init__(self) -> None:
            super().__init__()
            self.interrupted = False

        def result(self, timeout: float | None = None) -> Any:
            if not self.interrupted:
                self.interrupted = True
                raise KeyboardInterrupt
            return super().result(timeout)

    class Inline:
        def submit(self, fn: Any, *args: Any) -> Future:  # type: ignore[type-arg]
            future = Interrupted()
            future.set_result(fn(*args))
            return future

        def shutdown(self, wait: bool = True) -> None:
            return None

    bursts, publisher, gate = _burst(store, 2 * BATCH)
    bursts._settler = Inline  # type: ignore[assignment, method-assign]
    with pytest.raises(KeyboardInterrupt):
        bursts.run(T0 + 60_000, EPOCH, lambda: True)
    assert len(_enqueued(store, 2 * BATCH)) == len(publisher.messages) == BATCH
    assert gate.calls[-1][0] == "after" and len(gate.calls[-1][1][0]) == BATCH
    assert bursts.finished.claimed == BATCH


def test_a_failed_burst_says_which_rounds_it_finished(store: WatchedStore) -> None:
    bursts, _, _ = _burst(store, 4 * BATCH)
    store.settle_fails_at = 3
    with pytest.raises(InjectedFault):
        bursts.run(T0 + 60_000, EPOCH, lambda: True)
    bursts.close()
    assert bursts.finished.claimed == 2 * BATCH
    assert len(bursts.finished.events) == len(_enqueued(store, 4 * BATCH)) == 2 * BATCH
