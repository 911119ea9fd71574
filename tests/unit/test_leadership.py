"""``Leadership`` and ``BeatLoop`` without a store, a broker or real time (SPEC §7).

A scripted lease answers each acquire-or-renew, a manual clock stands in for the monotonic clock,
and the assertions read the log records' ``action`` (the stable vocabulary), never their text.
The same rules with real stores, Redis and processes are in ``tests/integration/test_leadership.py``
and ``tests/reliability``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import pytest

from celery_durable_beat.beat_loop import BACKOFF_MAX_S, PRUNE_BUDGET, PRUNE_EVERY_MS, BeatLoop
from celery_durable_beat.dispatch import OpenRound, RoundStats
from celery_durable_beat.exceptions import (
    LeaseError,
    SchemaOutdated,
    StaleEpoch,
    StoreUnavailable,
)
from celery_durable_beat.leadership import EXPIRY_MARGIN_S, RENEW_AFTER, Leadership
from celery_durable_beat.lease.base import LEASE_SAFETY, LeaseStatus
from celery_durable_beat.model import Action, Outcome, Trigger
from celery_durable_beat.store.base import PRUNE_CHUNK, AuditEvent

pytestmark = pytest.mark.unit

TTL = 30.0
ME, OTHER = "beat-a:1", "beat-b:2"


class ManualClock:
    """Time moves only when the test says so."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall_ms = 1_780_000_000_000

    def now_ms(self) -> int:
        return self.wall_ms

    def monotonic(self) -> float:
        return self.mono


class ScriptedLease:
    """Answers acquire-or-renew from a script; each answer may take ``latency`` seconds."""

    def __init__(self, clock: ManualClock, ttl: float = TTL) -> None:
        self.clock = clock
        self.ttl_seconds = ttl
        self.answers: list[LeaseStatus | Exception] = []
        self.latency = 0.0
        self.released = 0
        self.closed = False
        self.release_error: Exception | None = None

    def acquire_or_renew(self) -> LeaseStatus:
        self.clock.mono += self.latency
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def release(self) -> None:
        self.released += 1
        if self.release_error is not None:
            raise self.release_error

    def close(self) -> None:
        self.closed = True


def leads(epoch: int = 1) -> LeaseStatus:
    return LeaseStatus(leader=True, epoch=epoch, holder=ME, expires_at_ms=None, remaining_ms=30_000)


def stands_by(
    holder: str | None = OTHER, epoch: int = 1, remaining_ms: int = 30_000
) -> LeaseStatus:
    return LeaseStatus(
        leader=False, epoch=epoch, holder=holder, expires_at_ms=None, remaining_ms=remaining_ms
    )


@dataclass
class FakeStore:
    """The store calls the loop and leadership make, answered from memory."""

    namespace: str | None = None
    now_ms_value: int = 1_780_000_000_000
    due_ms: int | None = None
    epochs: list[int] = field(default_factory=list)
    pruned: list[tuple[list[str], int]] = field(default_factory=list)
    sync_calls: int = 0
    schema_error: Exception | None = None
    due_error: Exception | None = None

    def register_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def ensure_schema(self) -> None:
        if self.schema_error is not None:
            raise self.schema_error

    def now_ms(self) -> int:
        return self.now_ms_value

    def clock_and_earliest_due(self) -> tuple[int, int | None]:
        if self.due_error is not None:
            raise self.due_error
        return self.now_ms_value, self.due_ms

    def definition_digests(self, names: list[str]) -> list[Any]:
        self.sync_calls += 1
        return []

    def sync_config(
        self, changes: list[Any], epoch: int, now_ms: int, app: str | None = None
    ) -> list[Any]:
        return []

    def prune_history(self, names: list[str], keep: int) -> int:
        self.pruned.append((names, keep))
        return 0

    def close(self) -> None:
        """Nothing to close."""


class FakeDispatcher:
    """Runs "rounds" that record one event per call, or fail as the test says, through the
    phases a burst calls (``burst.BurstRounds``); each settles on ``settle``'s epoch."""

    batch_size = 500
    gate = None
    settles_beside_claims = False

    def __init__(self, store: FakeStore) -> None:
        self.store = self  # the burst settles through ``dispatcher.store.settle``
        self.due_store = store
        self.error: Exception | None = None
        self.broker_down = False
        self.epochs: list[int] = []
        self.names = ["s"]  # the schedules each round records an event for

    def claim(self, rnd: OpenRound, excluding: Collection[int] = ()) -> None:
        if self.error is not None:
            raise self.error
        rnd.stats.claimed = 1
        rnd.stats.more_due = rnd.stats.claimed >= self.batch_size

    def publish(self, rnd: OpenRound) -> None:
        rnd.stats.events = [
            AuditEvent(name, rnd.now_ms, f"{name}@x", Trigger.AUTO, Outcome.ENQUEUED, version=1)
            for name in self.names
        ]
        rnd.stats.broker_unavailable = self.broker_down

    def settle(self, events: Any, advances: Any, epoch: int) -> list[bool]:
        self.epochs.append(epoch)
        self.due_store.due_ms = self.due_store.now_ms_value + 10_000  # the schedule advanced
        return []

    def abandon(self, rnd: OpenRound) -> None:
        return None

    def finish(self, rnd: OpenRound, applied: Any) -> RoundStats:
        return rnd.stats


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def lease(clock: ManualClock) -> ScriptedLease:
    return ScriptedLease(clock)


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def leadership(lease: ScriptedLease, store: FakeStore, clock: ManualClock) -> Leadership:
    return Leadership(lease, store, clock, poll_interval=1.0)


@pytest.fixture
def actions(caplog: pytest.LogCaptureFixture) -> Any:
    """The ``action`` of each record logged by the package since the last call."""
    caplog.set_level(logging.DEBUG, logger="celery_durable_beat")

    def read() -> list[str]:
        found = [getattr(r, "action", None) for r in caplog.records]
        caplog.clear()
        return found

    return read


# -- Leadership -------------------------------------------------------------------------------
def test_gaining_registers_the_epoch_first_and_is_logged_once(
    leadership: Leadership, lease: ScriptedLease, store: FakeStore, actions: Any
) -> None:
    lease.answers = [leads(3)]
    assert leadership.acquire() and leadership.still_leader()
    assert (store.epochs, leadership.epoch, leadership.was_leader) == ([3], 3, True)
    assert actions() == [Action.LEADERSHIP_GAINED.value]
    for _ in range(3):
        assert leadership.acquire()
    assert store.epochs == [3] and actions() == []


def test_a_new_epoch_while_leading_is_registered_before_it_is_used(
    leadership: Leadership, lease: ScriptedLease, store: FakeStore, actions: Any
) -> None:
    lease.answers = [leads(1), leads(2)]
    leadership.acquire()
    leadership.acquire(fresh_for=0.0)  # renew now
    assert store.epochs == [1, 2] and leadership.epoch == 2
    assert actions() == [Action.LEADERSHIP_GAINED.value] * 2


def test_a_renewal_is_trusted_from_before_it_was_sent(
    leadership: Leadership, lease: ScriptedLease, clock: ManualClock
) -> None:
    lease.answers = [leads()]
    lease.latency = 1.0  # the answer comes back a second after the request left
    started = clock.mono
    assert leadership.acquire()
    clock.mono = started + TTL * LEASE_SAFETY - 0.001
    assert leadership.still_leader()
    clock.mono = started + TTL * LEASE_SAFETY
    assert not leadership.still_leader()


def test_a_standby_names_the_leader_once_per_change(
    leadership: Leadership, lease: ScriptedLease, store: FakeStore, actions: Any
) -> None:
    lease.answers = [stands_by(None), stands_by(OTHER), stands_by(OTHER), stands_by("beat-c:3")]
    for _ in range(4):
        assert not leadership.acquire()
        assert not leadership.still_leader()
    assert actions() == [Action.STANDBY.value] * 3  # nobody, then beat-b, then beat-c
    assert store.epochs == []


def test_losing_the_lease_is_logged_once_and_no_standby_line_follows(
    leadership: Leadership, lease: ScriptedLease, clock: ManualClock, actions: Any
) -> None:
    lease.answers = [leads(1), stands_by(OTHER, 2), stands_by(OTHER, 2)]
    leadership.acquire()
    actions()
    clock.mono += TTL * RENEW_AFTER  # the renewal is due
    for _ in range(3):
        assert not leadership.acquire()
    assert actions() == [Action.LEADERSHIP_LOST.value]
    assert leadership.was_leader is False and not leadership.still_leader()


def test_a_lapsed_renewal_is_lost_once(
    leadership: Leadership, lease: ScriptedLease, clock: ManualClock, actions: Any
) -> None:
    lease.answers = [leads()]
    leadership.acquire()
    actions()
    leadership.lose_if_lapsed()
    assert actions() == []  # still covered
    clock.mono += TTL
    leadership.lose_if_lapsed()
    leadership.lose_if_lapsed()
    assert actions() == [Action.LEADERSHIP_LOST.value]


def test_a_fenced_leader_loses_and_releases_even_if_the_release_fails(
    leadership: Leadership, lease: ScriptedLease, actions: Any
) -> None:
    lease.answers = [leads()]
    leadership.acquire()
    actions()
    lease.release_error = LeaseError("redis down")
    leadership.fenced()
    assert lease.released == 1 and not leadership.still_leader()
    assert actions() == [Action.LEADERSHIP_LOST.value, Action.LEASE_RELEASE_FAILED.value]


def test_a_standby_tries_right_after_a_silent_leader_s_expiry(
    leadership: Leadership, lease: ScriptedLease
) -> None:
    assert leadership.max_sleep() == 1.0  # min(poll 1 s, ttl 30 s / 3)
    assert leadership.standby_delay() == 1.0  # nothing known yet
    lease.answers = [stands_by(remaining_ms=300)]
    leadership.acquire()
    assert leadership.standby_delay() == pytest.approx(0.3 + EXPIRY_MARGIN_S)
    lease.answers = [stands_by(remaining_ms=20_000)]
    leadership.acquire()
    assert leadership.standby_delay() == 1.0


def test_a_short_ttl_shortens_every_wait(store: FakeStore, clock: ManualClock) -> None:
    short = Leadership(ScriptedLease(clock, ttl=0.9), store, clock, poll_interval=1.0)
    assert short.max_sleep() == pytest.approx(0.3)


def test_close_releases_says_so_and_closes_the_lease(
    leadership: Leadership, lease: ScriptedLease, actions: Any
) -> None:
    lease.answers = [leads()]
    leadership.acquire()
    actions()
    leadership.close()
    assert lease.released == 1 and lease.closed
    assert actions() == [Action.LEADERSHIP_LOST.value]


def test_close_survives_a_failing_release(
    leadership: Leadership, lease: ScriptedLease, actions: Any
) -> None:
    lease.answers = [leads()]
    leadership.acquire()
    actions()
    lease.release_error = LeaseError("gone")
    leadership.close()
    assert lease.closed and actions() == [Action.LEASE_RELEASE_FAILED.value]


def test_close_of_a_beat_that_never_led_asks_nothing_of_the_lease(
    leadership: Leadership, lease: ScriptedLease, actions: Any
) -> None:
    """Nothing to release; a beat refusing an outdated schema must not query the lease's
    columns, which the old schema lacks."""
    lease.release_error = RuntimeError("the release must not be called")
    leadership.close()
    assert lease.released == 0 and lease.closed and actions() == []


# -- BeatLoop ---------------------------------------------------------------------------------
@pytest.fixture
def dispatcher(store: FakeStore) -> FakeDispatcher:
    return FakeDispatcher(store)


@pytest.fixture
def loop(store: FakeStore, dispatcher: FakeDispatcher, leadership: Leadership) -> BeatLoop:
    return BeatLoop(store, dispatcher, leadership, definitions=[], history_keep=7)


def test_an_idle_leader_sleeps_until_the_next_due_instant(
    loop: BeatLoop, lease: ScriptedLease, store: FakeStore
) -> None:
    lease.answers = [leads()]
    store.due_ms = store.now_ms_value + 250
    assert loop.round() == pytest.approx(0.25)
    store.due_ms = None
    assert loop.round() == 1.0
    store.due_ms = store.now_ms_value + 60_000
    assert loop.round() == 1.0  # never longer than max_sleep: the lease must be renewed


def test_config_sync_runs_once_per_epoch(
    loop: BeatLoop, lease: ScriptedLease, store: FakeStore, clock: ManualClock
) -> None:
    lease.answers = [leads(1), leads(1), leads(2)]
    for _ in range(3):
        loop.round()
        clock.mono += TTL * RENEW_AFTER
    assert store.sync_calls == 2


def test_an_idle_leader_renews_once_a_third_of_the_ttl_has_passed(
    loop: BeatLoop, lease: ScriptedLease, store: FakeStore, clock: ManualClock
) -> None:
    """Issue #16: an idle round is one store probe; the lease is renewed when it ages, and
    always before a round that dispatches."""
    calls = []
    lease.answers = [leads()]
    original = lease.acquire_or_renew
    lease.acquire_or_renew = lambda: calls.append(clock.mono) or original()  # type: ignore[method-assign]
    loop.round()
    for _ in range(9):
        clock.mono += TTL * RENEW_AFTER / 10
        loop.round()
    assert len(calls) == 1  # idle and fresh: no renewal
    clock.mono += TTL * RENEW_AFTER / 10
    loop.round()
    assert len(calls) == 2  # a third of the TTL since the last renewal
    assert loop.leadership.still_leader()
    store.due_ms = store.now_ms_value
    loop.round()
    assert len(calls) == 3  # something due: renewed before dispatching


def test_no_config_sync_when_it_is_off(
    store: FakeStore, dispatcher: FakeDispatcher, leadership: Leadership, lease: ScriptedLease
) -> None:
    off = BeatLoop(store, dispatcher, leadership, definitions=None, history_keep=7)
    lease.answers = [leads()]
    off.round()
    assert store.sync_calls == 0


def test_a_standby_never_dispatches(
    loop: BeatLoop, lease: ScriptedLease, store: FakeStore, dispatcher: FakeDispatcher
) -> None:
    lease.answers = [stands_by(remaining_ms=100)]
    store.due_ms = store.now_ms_value - 1
    assert loop.round() == pytest.approx(0.1 + EXPIRY_MARGIN_S)
    assert dispatcher.epochs == [] and store.sync_calls == 0


def test_due_work_is_dispatched_at_the_leader_s_epoch_and_pruned(
    loop: BeatLoop, lease: ScriptedLease, store: FakeStore, dispatcher: FakeDispatcher
) -> None:
    lease.answers = [leads(4)]
    store.due_ms = store.now_ms_value
    store.now_ms_value += PRUNE_EVERY_MS
    assert loop.round() == 1.0
    assert dispatcher.epochs == [4] and store.pruned == [(["s"], 7)]


def test_pruning_waits_for_a_burst_to_end_and_spends_a_bounded_slice_of_the_ttl(
    loop: BeatLoop,
    lease: ScriptedLease,
    store: FakeStore,
    dispatcher: FakeDispatcher,
    clock: ManualClock,
) -> None:
    lease.answers = [leads()]
    dispatcher.names = [f"s{i:04d}" for i in range(3 * PRUNE_CHUNK)]
    dispatcher.batch_size = 1  # every round claims a full batch: a burst goes on
    store.due_ms = store.now_ms_value
    store.now_ms_value += PRUNE_EVERY_MS
    assert loop.round() == 0.0 and store.pruned == []  # never inside a burst

    def slow_prune(names: list[str], keep: int) -> int:
        clock.mono += TTL * PRUNE_BUDGET * 0.6  # each statement takes 60 % of the budget
        store.pruned.append((names, keep))
        return 0

    store.prune_history = slow_prune  # type: ignore[method-assign]
    assert loop.round() == 1.0  # idle now: a pass starts, and stops when its budget is spent
    assert [len(names) for names, _ in store.pruned] == [PRUNE_CHUNK, PRUNE_CHUNK]
    loop.round()  # the next quiet round finishes the pass
    assert [len(names) for names, _ in store.pruned] == [PRUNE_CHUNK] * 3
    assert sorted(n for names, _ in store.pruned for n in names) == dispatcher.names


def test_failures_back_off_doubling_up_to_a_third_of_the_ttl(
    loop: BeatLoop, lease: ScriptedLease, store: FakeStore, actions: Any
) -> None:
    lease.answers = [leads()]
    loop.round()
    actions()
    store.due_error = StoreUnavailable("the durable beat store at sqlite:///x failed: gone")
    delays = [loop.round() for _ in range(7)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, TTL / 3, TTL / 3]
    assert TTL / 3 < BACKOFF_MAX_S
    assert set(actions()) == {Action.STORE_UNAVAILABLE.value}
    store.due_error = None
    assert loop.round() == 1.0 and loop.failures == 0  # an idle round after recovery resets


def test_a_lease_outage_backs_off_and_a_lapsed_leader_says_it_lost(
    loop: BeatLoop, lease: ScriptedLease, clock: ManualClock, actions: Any
) -> None:
    lease.answers = [leads()]
    loop.round()
    actions()
    lease.answers = [LeaseError("the Redis lease at redis://x failed")]
    clock.mono += TTL * RENEW_AFTER  # the renewal is due, and fails
    assert loop.round() == 0.5
    assert actions() == [Action.LEASE_UNAVAILABLE.value]
    clock.mono += TTL
    assert loop.round() == 1.0
    assert actions() == [Action.LEADERSHIP_LOST.value, Action.LEASE_UNAVAILABLE.value]


def test_a_broker_outage_keeps_the_backoff_through_idle_rounds(
    loop: BeatLoop, lease: ScriptedLease, store: FakeStore, dispatcher: FakeDispatcher
) -> None:
    lease.answers = [leads()]
    store.due_ms = store.now_ms_value
    dispatcher.error = ConnectionError("broker refused")
    assert loop.round() == 0.5 and loop.broker_down
    store.due_ms = store.now_ms_value + 100  # an idle round between broker retries
    loop.round()
    assert loop.failures == 1
    dispatcher.error, store.due_ms = None, store.now_ms_value
    dispatcher.broker_down = True  # the publisher reports the outage itself
    assert loop.round() == 1.0 and loop.failures == 2


def test_a_fenced_round_loses_leadership_and_releases(
    loop: BeatLoop, lease: ScriptedLease, store: FakeStore, dispatcher: FakeDispatcher, actions: Any
) -> None:
    lease.answers = [leads()]
    loop.round()
    actions()
    store.due_ms, dispatcher.error = store.now_ms_value, StaleEpoch("epoch 1 < 6")
    assert loop.round() == 1.0
    assert lease.released == 1 and actions() == [Action.LEADERSHIP_LOST.value]


def test_an_unexpected_failure_is_logged_with_its_own_action_and_backed_off(
    loop: BeatLoop,
    lease: ScriptedLease,
    store: FakeStore,
    dispatcher: FakeDispatcher,
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease.answers = [leads()]
    store.due_ms, dispatcher.error = store.now_ms_value, KeyError("bug in a gate")
    caplog.set_level(logging.DEBUG, logger="celery_durable_beat")
    caplog.clear()
    assert loop.round() == 0.5
    (record,) = [r for r in caplog.records if r.__dict__.get("action") == "round_failed"]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert "KeyError: 'bug in a gate'" in record.getMessage()
    assert not [r for r in caplog.records if r.__dict__.get("action") == "store_unavailable"]


def test_a_broker_failure_is_tagged_broker_unavailable(
    loop: BeatLoop, lease: ScriptedLease, store: FakeStore, dispatcher: FakeDispatcher, actions: Any
) -> None:
    lease.answers = [leads()]
    loop.round()
    actions()
    store.due_ms, dispatcher.error = store.now_ms_value, ConnectionError("broker refused")
    assert loop.round() == 0.5
    assert actions() == [Action.BROKER_UNAVAILABLE.value]
    dispatcher.error, dispatcher.broker_down = None, True  # a publish failed on the broker
    loop.round()
    assert actions() == [Action.BROKER_UNAVAILABLE.value]


def test_an_outdated_schema_stops_beat(loop: BeatLoop, store: FakeStore, actions: Any) -> None:
    store.schema_error = SchemaOutdated("run celery -A proj durable-beat migrate")
    with pytest.raises(SchemaOutdated):
        loop.round()
    assert actions() == [Action.BEAT_REFUSED.value]


def test_a_store_down_at_start_is_retried_by_the_rounds(
    loop: BeatLoop, lease: ScriptedLease, store: FakeStore, actions: Any
) -> None:
    store.schema_error = StoreUnavailable("down")
    loop.prepare()
    assert not loop.schema_ready and actions() == [Action.STORE_UNAVAILABLE.value]
    lease.answers = [leads()]
    assert loop.round() == 0.5
    store.schema_error = None
    loop.round()
    assert loop.schema_ready


def test_keep_leading_renews_a_lease_that_ages_during_a_long_round(
    leadership: Leadership, lease: ScriptedLease, clock: ManualClock
) -> None:
    """A round longer than the lease (a burst into a slow broker) keeps it while it runs: the
    chaos scenario ``rabbitmq_restart`` saw two beats fence each other's round 80 times."""
    lease.answers = [leads(4)]
    assert leadership.acquire(fresh_for=0.0)
    for _ in range(12):  # four TTLs of publishing, checked every third of a third of the TTL
        clock.mono += TTL * RENEW_AFTER / 3
        assert leadership.keep_leading()
    assert leadership.still_leader() and leadership.epoch == 4


def test_keep_leading_stops_on_a_lost_lease_a_new_epoch_or_a_lapsed_renewal(
    leadership: Leadership, lease: ScriptedLease, clock: ManualClock
) -> None:
    lease.answers = [leads(4), stands_by(OTHER, 5)]
    leadership.acquire(fresh_for=0.0)
    clock.mono += TTL * RENEW_AFTER
    assert not leadership.keep_leading()  # someone else holds it now

    lease.answers = [leads(6), leads(7)]
    leadership.acquire(fresh_for=0.0)
    clock.mono += TTL * RENEW_AFTER
    assert not leadership.keep_leading()  # leading again, but under another epoch

    lease.answers = [leads(7), LeaseError("Redis does not answer")]
    leadership.acquire(fresh_for=0.0)
    clock.mono += TTL * RENEW_AFTER
    assert leadership.keep_leading()  # the last renewal still covers it
    clock.mono += TTL * LEASE_SAFETY
    assert not leadership.keep_leading()  # ... until its safety window has passed


def test_keep_leading_is_false_for_a_standby(leadership: Leadership, lease: ScriptedLease) -> None:
    lease.answers = [stands_by(OTHER)]
    assert not leadership.keep_leading()
