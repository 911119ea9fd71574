"""The store contract (``store/base.py``) held against every backend: SqlStore on PostgreSQL and
SQLite, and MemoryStore (the shared ``store`` fixture of ``tests/conftest.py``).

One test per numbered rule and per method; every test gets a fresh, empty store. Tests of one
backend's own machinery (connections, URLs) name that backend and say why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from celery_durable_beat.exceptions import (
    InvalidArgument,
    ScheduleNotFound,
    StaleEpoch,
    StoreUnavailable,
)
from celery_durable_beat.ids import jitter_offset_ms, tick_task_id
from celery_durable_beat.model import (
    Definition,
    OperatorAction,
    Outcome,
    ScheduleState,
    Source,
    StateReason,
    Trigger,
)
from celery_durable_beat.schedules.spec import CronSpec, IntervalSpec
from celery_durable_beat.store.base import (
    ActionEntry,
    Advance,
    AuditEvent,
    Recheck,
    Store,
    UpsertOutcome,
)
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.tables import runs

pytestmark = pytest.mark.integration

MINUTE = 60_000


def definition(name: str, every_ms: int = MINUTE, **extra: object) -> Definition:
    return Definition(name=name, task="tasks.work", spec=IntervalSpec(every_ms), **extra)  # type: ignore[arg-type]


def add(store: Store, name: str, first_tick_ms: int, *, enabled: bool = True) -> int:
    store.upsert(definition(name, enabled=enabled), Source.CONFIG, first_tick_ms, now_ms=0)
    record = store.get(name)
    assert record is not None
    return record.id


def enqueued(name: str, tick_ms: int, **extra: object) -> AuditEvent:
    return AuditEvent(
        schedule=name,
        tick_ms=tick_ms,
        task_id=tick_task_id(name, tick_ms),
        trigger=Trigger.AUTO,
        outcome=Outcome.ENQUEUED,
        **extra,  # type: ignore[arg-type]
    )


def moved(schedule_id: int, expected: int, to: int, **extra: object) -> Advance:
    fields: dict[str, object] = {
        "next_due_ms": to,
        "last_tick_ms": expected,
        "last_outcome": Outcome.ENQUEUED,
        "failures": 0,
        **extra,
    }
    return Advance(schedule_id, expected, to, **fields)  # type: ignore[arg-type]


def track_run(store: Store) -> Callable[[str, int, str], None]:
    """How the worker side records a run's state where the store's history reads it."""
    if isinstance(store, MemoryStore):
        states: dict[str, str] = {}
        store.attach_run_states(states.get)
        return lambda task_id, tick_ms, state: states.__setitem__(task_id, state)
    assert isinstance(store, SqlStore)

    def insert(task_id: str, tick_ms: int, state: str) -> None:
        with store._get_engine().begin() as conn:
            conn.execute(
                runs.insert().values(
                    task_id=task_id,
                    schedule_key="job",
                    tick_ms=tick_ms,
                    trigger="auto",
                    state=state,
                    updated_at_ms=1,
                )
            )

    return insert


# -- rule 1: time ---------------------------------------------------------------------------------
def test_now_ms_is_the_store_clock_in_epoch_ms(store: Store) -> None:
    before = time.time_ns() // 1_000_000
    now = store.now_ms()
    assert abs(now - before) < 5_000
    assert store.now_ms() >= now


# -- rule 2: due rows -----------------------------------------------------------------------------
def test_claim_due_returns_only_due_active_rows_earliest_first(store: Store) -> None:
    add(store, "late", 3_000)
    add(store, "early", 1_000)
    add(store, "future", 9_000)
    add(store, "disabled", 500, enabled=False)
    add(store, "paused", 800)
    store.set_state("paused", ScheduleState.PAUSED, now_ms=1)

    with store.claim_due(5_000, limit=10) as claim:
        names = [due.name for due in claim.schedules]
        first = claim.schedules[0]
    assert names == ["early", "late"]
    assert (first.next_tick_ms, first.version, first.failures, first.last_tick_ms) == (
        1_000,
        1,
        0,
        None,
    )
    assert first.definition == definition("early")


def test_claim_due_honours_the_limit(store: Store) -> None:
    for index in range(5):
        add(store, f"s{index}", 1_000 + index)
    with store.claim_due(10_000, limit=3) as claim:
        assert [due.name for due in claim.schedules] == ["s0", "s1", "s2"]
    with pytest.raises(InvalidArgument), store.claim_due(10_000, limit=0):
        pass


def test_claim_due_leaves_out_the_rows_it_is_told_to(store: Store) -> None:
    """Rule 12: a burst's next claim skips the rows being settled beside it, and still fills
    its limit from the rows after them."""
    for index in range(6):
        add(store, f"s{index}", 1_000 + index)
    with store.claim_due(10_000, limit=10) as claim:
        ids = {due.name: due.id for due in claim.schedules}
    settling = [ids["s0"], ids["s1"], ids["s3"]]
    with store.claim_due(10_000, limit=2, excluding=settling) as claim:
        assert [due.name for due in claim.schedules] == ["s2", "s4"]
    with store.claim_due(10_000, limit=10, excluding=settling) as claim:
        assert [due.name for due in claim.schedules] == ["s2", "s4", "s5"]
    with store.claim_due(10_000, limit=10, excluding=list(ids.values())) as claim:
        assert list(claim.schedules) == []
    assert isinstance(store.settles_beside_claims, bool)


def test_inactive_rows_never_become_due(store: Store) -> None:
    for name, state in [
        ("paused", ScheduleState.PAUSED),
        ("archived", ScheduleState.ARCHIVED),
        ("quarantined", ScheduleState.QUARANTINED),
    ]:
        add(store, name, 1_000)
        record = store.set_state(name, state, now_ms=1, next_tick_ms=1_000)
        assert record.next_due_ms is None
    with store.claim_due(10**12, limit=10) as claim:
        assert list(claim.schedules) == []
    assert store.earliest_due_ms() is None
    assert store.due_backlog(10**12) == 0
    with pytest.raises(InvalidArgument):
        store.set_state("paused", ScheduleState.PAUSED, now_ms=1, next_due_ms=5)


def test_earliest_due_ms(store: Store) -> None:
    assert store.earliest_due_ms() is None
    add(store, "b", 7_000)
    add(store, "a", 4_000)
    assert store.earliest_due_ms() == 4_000


def test_clock_and_earliest_due_in_one_read(store: Store) -> None:
    before = store.now_ms()
    assert store.clock_and_earliest_due()[1] is None
    add(store, "a", 4_000)
    clock, due = store.clock_and_earliest_due()
    assert due == 4_000
    assert before <= clock <= store.now_ms()


def test_a_claim_holds_nothing_while_the_round_publishes(
    store: Store, request: pytest.FixtureRequest
) -> None:
    """Another process (the CLI, a worker) writes promptly while a claim is open, and a second
    beat reads the same rows: fencing and the compare-and-set settle what it may do."""
    other: Store = store if isinstance(store, MemoryStore) else SqlStore(store.url)
    for index in range(3):
        add(store, f"s{index}", 1_000 + index)
    try:
        with store.claim_due(10_000, limit=10) as claim:
            started = time.monotonic()
            other.set_state("s2", ScheduleState.PAUSED, now_ms=5_000)
            assert time.monotonic() - started < 2.0  # SQLite's busy timeout is 10 s
            with other.claim_due(10_000, limit=10) as second:
                assert [d.name for d in second.schedules] == ["s0", "s1"]
            assert [d.name for d in claim.schedules] == ["s0", "s1", "s2"]
        paused = claim.schedules[2]
        advance = moved(paused.id, paused.next_tick_ms, 61_000)
        assert store.settle([], [advance], epoch=0) == [False]  # the pause stands
    finally:
        if other is not store:
            other.close()


# -- rule 3: audit before advance -----------------------------------------------------------------
def test_settle_writes_audit_and_advance_together_or_nothing(store: Store) -> None:
    schedule_id = add(store, "job", 1_000)
    with store.claim_due(5_000, limit=10) as claim:
        assert claim.enqueued_task_ids([tick_task_id("job", 1_000)]) == set()
    with pytest.raises(InvalidArgument):  # a malformed batch: not even the records are written
        store.settle(
            [enqueued("job", 1_000)],
            [moved(schedule_id, 1_000, 2_000), moved(schedule_id, 1_000, 3_000)],
            epoch=0,
        )
    assert store.history("job", limit=10) == []

    applied = store.settle(
        [enqueued("job", 1_000, lag_ms=12, version=1)],
        [moved(schedule_id, 1_000, 61_000)],
        epoch=0,
    )
    assert applied == [True]
    with store.claim_due(5_000, limit=10) as claim:
        assert claim.enqueued_task_ids([tick_task_id("job", 1_000)]) == {tick_task_id("job", 1_000)}
    [event] = store.history("job", limit=10)
    assert (event.outcome, event.trigger, event.lag_ms, event.version) == (
        Outcome.ENQUEUED,
        Trigger.AUTO,
        12,
        1,
    )
    assert abs(event.recorded_at_ms - store.now_ms()) < 5_000
    record = store.get("job")
    assert record is not None and record.next_tick_ms == 61_000


def test_enqueued_event_is_unique_per_task_id(store: Store) -> None:
    add(store, "job", 1_000)
    store.settle([enqueued("job", 1_000), enqueued("job", 1_000)], [], epoch=0)
    store.settle([enqueued("job", 1_000)], [], epoch=0)
    store.settle([enqueued("job", 1_000)], (), epoch=0)  # a replay after a crash
    duplicate = AuditEvent(
        schedule="job",
        tick_ms=1_000,
        task_id=tick_task_id("job", 1_000),
        trigger=Trigger.AUTO,
        outcome=Outcome.DEDUPLICATED,
        reason="already_enqueued",
    )
    store.settle([duplicate, duplicate], (), epoch=0)  # only enqueued events are unique
    outcomes = [event.outcome for event in store.history("job", limit=10)]
    assert sorted(outcomes) == [Outcome.DEDUPLICATED, Outcome.DEDUPLICATED, Outcome.ENQUEUED]


def test_enqueued_task_ids_reports_only_enqueued_records(store: Store) -> None:
    ids = [tick_task_id("job", tick) for tick in range(0, 3_000, 1_000)]
    store.settle([enqueued("job", 0)], (), epoch=0)
    store.settle(
        [
            AuditEvent(
                schedule="job",
                tick_ms=1_000,
                task_id=ids[1],
                trigger=Trigger.AUTO,
                outcome=Outcome.FAILED,
                reason="broker_unavailable",
            )
        ],
        (),
        epoch=0,
    )
    with store.claim_due(0, limit=1) as claim:
        assert claim.enqueued_task_ids(ids) == {ids[0]}
        assert claim.enqueued_task_ids([]) == set()


def test_record_outside_a_claim_and_event_fields(store: Store) -> None:
    event = AuditEvent(
        schedule="Job",
        tick_ms=1_000,
        task_id=None,
        trigger=Trigger.AUTO,
        outcome=Outcome.SKIPPED,
        reason="missed",
        detail={"count": 3, "first_ms": 1_000, "last_ms": 3_000},
    )
    store.settle([event], (), epoch=0)
    [stored] = store.history("JOB", limit=5)
    assert (stored.schedule, stored.task_id, stored.reason, stored.detail) == (
        "Job",
        None,
        "missed",
        {"count": 3, "first_ms": 1_000, "last_ms": 3_000},
    )
    assert stored.run_state is None


# -- rule 4: fencing ------------------------------------------------------------------------------
def test_register_epoch_only_raises(store: Store) -> None:
    assert store.leader_info().epoch == 0
    store.register_epoch(5)
    store.register_epoch(3)
    info = store.leader_info()
    assert (info.epoch, info.holder, info.expires_at_ms) == (5, None, None)


def test_stale_epoch_is_rejected_and_writes_nothing(store: Store) -> None:
    schedule_id = add(store, "job", 1_000)
    store.register_epoch(7)

    with pytest.raises(StaleEpoch):
        store.settle([enqueued("job", 1_000)], (), epoch=6)
    with pytest.raises(StaleEpoch):
        store.settle([enqueued("job", 1_000)], [moved(schedule_id, 1_000, 61_000)], epoch=6)
    with pytest.raises(StaleEpoch):
        store.settle((), [moved(schedule_id, 1_000, 61_000)], epoch=6)
    assert store.history("job", limit=10) == []
    record = store.get("job")
    assert record is not None
    assert (record.next_tick_ms, record.next_due_ms) == (1_000, 1_000)

    store.settle([enqueued("job", 1_000)], (), epoch=7)
    assert store.settle((), [moved(schedule_id, 1_000, 61_000)], epoch=8) == [True]
    [event] = store.history("job", limit=10)
    assert event.epoch == 7


# -- rule 10: manual runs are written outside the fence, by design ---------------------------------
def manual(name: str, key: str, outcome: Outcome = Outcome.ENQUEUED) -> AuditEvent:
    return AuditEvent(name, 5_000, f"{name}@manual-{key}", Trigger.MANUAL, outcome, lag_ms=0)


def test_a_manual_run_is_recorded_with_no_leader_ever_registered(store: Store) -> None:
    add(store, "job", 1_000)
    assert store.leader_info().epoch == 0
    store.record_manual(manual("job", "a"))
    found = store.find_enqueued("job@manual-a")
    assert found is not None
    assert (found.trigger, found.outcome, found.epoch) == (Trigger.MANUAL, Outcome.ENQUEUED, 0)
    record = store.get("job")
    assert record is not None and record.next_tick_ms == 1_000  # it moves no schedule


def test_a_manual_run_is_recorded_under_any_newer_epoch_and_an_old_round_is_still_refused(
    store: Store,
) -> None:
    schedule_id = add(store, "job", 1_000)
    store.register_epoch(3)
    store.settle([enqueued("job", 1_000)], [moved(schedule_id, 1_000, 61_000)], epoch=3)
    store.register_epoch(9)  # a new leader took over; the operator's run needs no epoch
    store.record_manual(manual("job", "b"))
    store.record_manual(manual("job", "b"))  # a repeat of its task id is dropped (rule 3)
    found = store.find_enqueued("job@manual-b")
    assert found is not None and found.epoch == 9  # the newest at the time, for reading only
    assert [e.trigger for e in store.history("job", 10)] == [Trigger.MANUAL, Trigger.AUTO]
    with pytest.raises(StaleEpoch):  # the fence still holds for the round
        store.settle([enqueued("job", 61_000)], [moved(schedule_id, 61_000, 121_000)], epoch=3)
    assert len(store.history("job", 10)) == 2


def test_record_manual_refuses_an_automatic_record(store: Store) -> None:
    add(store, "job", 1_000)
    with pytest.raises(InvalidArgument, match="manual runs only"):
        store.record_manual(enqueued("job", 1_000))
    assert store.history("job", 10) == []


def backfilled(name: str, tick_ms: int) -> AuditEvent:
    return AuditEvent(
        name, tick_ms, tick_task_id(name, tick_ms), Trigger.BACKFILL, Outcome.ENQUEUED
    )


def test_record_backfill_is_unfenced_and_dedups_against_the_automatic_record(store: Store) -> None:
    schedule_id = add(store, "job", 1_000)
    store.register_epoch(3)
    store.settle([enqueued("job", 1_000)], [moved(schedule_id, 1_000, 61_000)], epoch=3)
    store.register_epoch(9)
    store.record_backfill([backfilled("job", 1_000), backfilled("job", -59_000)])
    triggers = [(e.tick_ms, e.trigger) for e in store.history("job", 10)]
    assert triggers == [(-59_000, Trigger.BACKFILL), (1_000, Trigger.AUTO)]  # 1_000: dropped
    ids = [tick_task_id("job", t) for t in (-59_000, 1_000, 61_000)]
    assert store.enqueued_among(ids) == set(ids[:2])
    assert store.history_extent("job") == (2, -59_000)
    assert store.history_extent("nobody") == (0, None)
    with pytest.raises(InvalidArgument, match="record_backfill writes backfills only"):
        store.record_backfill([enqueued("job", 121_000)])


# -- rule 12: who did what ---------------------------------------------------------------------
def test_action_rows_are_stamped_by_the_store_kept_per_schedule_and_outlive_it(
    store: Store,
) -> None:
    add(store, "job", 1_000)
    before = store.now_ms()
    for n in range(4):
        store.record_action(ActionEntry("alice", OperatorAction.PAUSE, "job", f"r{n}"), keep=3)
    store.record_action(ActionEntry("bob", OperatorAction.UPSERT, "Other"), keep=3)
    store.delete("job")
    store.record_action(ActionEntry("alice", OperatorAction.DELETE, "JOB", "bye"), keep=3)
    rows = store.actions("job", 10)
    assert [(r.actor, r.action, r.reason) for r in rows] == [
        ("alice", OperatorAction.DELETE, "bye"),
        ("alice", OperatorAction.PAUSE, "r3"),
        ("alice", OperatorAction.PAUSE, "r2"),
    ]
    assert all(before - 5_000 <= r.at_ms <= store.now_ms() + 5_000 for r in rows)
    everyone = store.actions(None, 10)
    assert [r.schedule for r in everyone] == ["JOB", "Other", "job", "job"]
    assert [r.id for r in store.actions(None, 2, before_id=everyone[1].id)] == [
        r.id for r in everyone[2:4]
    ]


def test_action_text_is_bounded_and_stored_as_given(store: Store) -> None:
    quoted = 'it\'s "fine"; DROP TABLE durable_beat_actions; --'
    store.record_action(ActionEntry("o'brien", OperatorAction.TRIGGER, "job", quoted), keep=5)
    (row,) = store.actions("job", 5)
    assert (row.actor, row.reason) == ("o'brien", quoted)
    with pytest.raises(InvalidArgument, match="at most 500"):
        store.record_action(ActionEntry("a", OperatorAction.PAUSE, "job", "x" * 501), keep=5)
    with pytest.raises(InvalidArgument, match="actor"):
        store.record_action(ActionEntry("", OperatorAction.PAUSE, "job"), keep=5)
    assert len(store.actions("job", 5)) == 1


# -- rule 5: compare-and-set advance --------------------------------------------------------------
def test_advance_moves_only_rows_still_where_the_round_found_them(store: Store) -> None:
    first = add(store, "first", 1_000)
    second = add(store, "second", 2_000)
    third = add(store, "third", 3_000)
    store.set_state("third", ScheduleState.PAUSED, now_ms=1, next_tick_ms=3_000)

    result = store.settle(
        (),
        [
            moved(first, 1_000, 61_000, next_due_ms=61_500),
            moved(second, 1_999, 62_000),  # someone moved it meanwhile
            moved(third, 3_000, 63_000),  # paused since the round read it
        ],
        epoch=2,
    )
    assert result == [True, False, False]
    record = store.get("first")
    assert record is not None
    assert (record.next_tick_ms, record.next_due_ms, record.last_tick_ms) == (
        61_000,
        61_500,
        1_000,
    )
    assert (record.last_outcome, record.failures, record.state) == (
        Outcome.ENQUEUED,
        0,
        ScheduleState.ACTIVE,
    )
    untouched = store.get("second")
    assert untouched is not None
    assert untouched.next_tick_ms == 2_000
    paused = store.get("third")
    assert paused is not None
    assert (paused.state, paused.next_tick_ms) == (ScheduleState.PAUSED, 3_000)
    assert store.settle((), [], epoch=2) == []


def test_advance_can_quarantine(store: Store) -> None:
    schedule_id = add(store, "bad", 1_000)
    quarantine = Advance(
        schedule_id=schedule_id,
        expected_next_tick_ms=1_000,
        next_tick_ms=61_000,
        next_due_ms=None,
        last_tick_ms=1_000,
        last_outcome=Outcome.FAILED,
        failures=5,
        state=ScheduleState.QUARANTINED,
    )
    assert store.settle((), [quarantine], epoch=0) == [True]
    record = store.get("bad")
    assert record is not None
    assert (record.state, record.failures, record.next_due_ms) == (
        ScheduleState.QUARANTINED,
        5,
        None,
    )
    assert store.counts_by_state()["quarantined"] == 1


def test_advance_rejects_inconsistent_batches(store: Store) -> None:
    schedule_id = add(store, "job", 1_000)
    with pytest.raises(InvalidArgument):
        store.settle((), [moved(schedule_id, 1_000, 2_000), moved(schedule_id, 1_000, 3_000)], 0)
    with pytest.raises(InvalidArgument):
        store.settle((), [moved(schedule_id, 1_000, 2_000, next_due_ms=None)], 0)


def test_advance_holds_a_buffered_tick_and_ends_a_schedule(store: Store) -> None:
    """SPEC §2/§6 columns every backend keeps: the ``buffer_one`` tick (also with no next tick
    left), a schedule past its end (active, next tick and due NULL), and a pause's reason."""
    held_id = add(store, "held", 1_000)
    ended_id = add(store, "ended", 1_000)
    paused_id = add(store, "failing", 1_000)
    hold = moved(held_id, 1_000, 61_000, next_due_ms=2_000, buffered_tick_ms=1_000)
    end = replace(moved(ended_id, 1_000, 0, next_due_ms=None), next_tick_ms=None)
    pause = Advance(
        schedule_id=paused_id,
        expected_next_tick_ms=1_000,
        next_tick_ms=1_000,
        next_due_ms=None,
        last_tick_ms=None,
        last_outcome=Outcome.SKIPPED,
        failures=0,
        state=ScheduleState.PAUSED,
        state_reason=StateReason.FAILURES,
    )
    assert store.settle((), [hold, end, pause], epoch=0) == [True, True, True]
    held, ended, failing = store.get("held"), store.get("ended"), store.get("failing")
    assert held is not None and ended is not None and failing is not None
    assert (held.buffered_tick_ms, held.next_due_ms) == (1_000, 2_000)
    assert (ended.state, ended.next_tick_ms, ended.next_due_ms) == (
        ScheduleState.ACTIVE,
        None,
        None,
    )
    assert (failing.state, failing.state_reason) == (ScheduleState.PAUSED, StateReason.FAILURES)
    with store.claim_due(3_000, 10) as claim:
        assert [(d.name, d.buffered_tick_ms) for d in claim.schedules] == [("held", 1_000)]
    # The held tick with no next tick left (past end_at) stays due, compared as NULL = NULL.
    past = replace(hold, expected_next_tick_ms=61_000, next_tick_ms=None)
    assert store.settle((), [past], epoch=0) == [True]
    done = replace(past, expected_next_tick_ms=None, buffered_tick_ms=None, next_due_ms=None)
    assert store.settle((), [done], epoch=0) == [True]
    cleared = store.get("held")
    assert cleared is not None and cleared.buffered_tick_ms is None


def test_set_state_reasons_and_the_failure_streak(store: Store) -> None:
    add(store, "job", 1_000)
    paused = store.set_state("job", ScheduleState.PAUSED, 5, reason=StateReason.OPERATOR)
    assert paused.state_reason is StateReason.OPERATOR
    resumed = store.set_state("job", ScheduleState.ACTIVE, 6, 60_000, 60_000)
    assert resumed.state_reason is None
    with store.claim_due(60_000, 10) as claim:
        assert [d.streak_from_ms for d in claim.schedules] == [60_000]
    ended = store.set_state("job", ScheduleState.ACTIVE, 7, None, None)  # past its end_at
    assert (ended.next_tick_ms, ended.next_due_ms) == (None, None)
    with pytest.raises(InvalidArgument):
        store.set_state("job", ScheduleState.ACTIVE, 8, None, 9)


# -- rule 6 and the control plane -----------------------------------------------------------------
def test_upsert_created_unchanged_updated(store: Store) -> None:
    created = store.upsert(definition("Nightly"), Source.CONFIG, 60_000, now_ms=10)
    assert (created.status, created.version) == ("created", 1)

    same = store.upsert(definition("NIGHTLY"), Source.CONFIG, 999_000, now_ms=20)
    assert (same.status, same.version) == ("unchanged", 1)
    record = store.get("nightly")
    assert record is not None
    assert (record.name, record.next_tick_ms, record.updated_at_ms) == ("Nightly", 60_000, 10)

    changed = store.upsert(definition("Nightly", every_ms=2 * MINUTE), Source.CONFIG, 120_000, 30)
    assert (changed.status, changed.version) == ("updated", 2)
    record = store.get("Nightly")
    assert record is not None
    assert (record.version, record.next_tick_ms, record.next_due_ms, record.source) == (
        2,
        120_000,
        120_000,
        Source.CONFIG,
    )
    assert record.definition.spec == IntervalSpec(2 * MINUTE)
    assert record.definition_hash == definition("Nightly", every_ms=2 * MINUTE).definition_hash()
    assert (record.created_at_ms, record.updated_at_ms) == (10, 30)


def test_upsert_plans_jitter_and_disabled_schedules(store: Store) -> None:
    cron = Definition(name="jittery", task="t", spec=CronSpec(("0", "3", "*", "*", "*")), jitter=30)
    store.upsert(cron, Source.API, 1_800_000, now_ms=0)
    record = store.get("jittery")
    assert record is not None
    assert record.next_due_ms == 1_800_000 + jitter_offset_ms("jittery", 1_800_000, 30)

    store.upsert(definition("off", enabled=False), Source.CONFIG, 5_000, now_ms=0)
    off = store.get("off")
    assert off is not None
    assert (off.state, off.next_tick_ms, off.next_due_ms) == (ScheduleState.PAUSED, 5_000, None)


def test_upsert_reactivates_archived_and_resets_failures(store: Store) -> None:
    add(store, "gone", 1_000)
    store.set_state("gone", ScheduleState.ARCHIVED, now_ms=5)
    back = store.upsert(definition("gone"), Source.CONFIG, 90_000, now_ms=6)
    assert (back.status, back.version) == ("updated", 1)
    record = store.get("gone")
    assert record is not None
    assert (record.state, record.next_tick_ms, record.next_due_ms) == (
        ScheduleState.ACTIVE,
        90_000,
        90_000,
    )


def test_upsert_of_a_name_the_other_source_owns_is_a_conflict(store: Store) -> None:
    store.upsert(definition("shared"), Source.API, 1_000, now_ms=0)
    result = store.upsert(definition("shared", every_ms=5 * MINUTE), Source.CONFIG, 2_000, 1)
    assert (result.status, result.version) == (UpsertOutcome.CONFLICT, 1)
    record = store.get("shared")
    assert record is not None
    assert (record.source, record.next_tick_ms) == (Source.API, 1_000)
    add(store, "declared", 1_000)  # config's: the API cannot take it over either
    result = store.upsert(definition("declared", every_ms=5 * MINUTE), Source.API, 2_000, 1)
    assert result.status is UpsertOutcome.CONFLICT
    declared = store.get("declared")
    assert declared is not None and (declared.source, declared.version) == (Source.CONFIG, 1)


def test_upsert_refuses_names_the_schema_cannot_hold(store: Store) -> None:
    with pytest.raises(InvalidArgument):
        store.upsert(definition("x" * 201), Source.API, 0, now_ms=0)


def test_set_state_pause_resume_and_unknown_names(store: Store) -> None:
    schedule_id = add(store, "job", 1_000)
    store.settle((), [moved(schedule_id, 1_000, 2_000, failures=2)], epoch=0)
    paused = store.set_state("JOB", ScheduleState.PAUSED, now_ms=50)
    assert (paused.state, paused.failures, paused.next_due_ms) == (ScheduleState.PAUSED, 0, None)
    resumed = store.set_state(
        "job", ScheduleState.ACTIVE, now_ms=60, next_tick_ms=9_000, next_due_ms=9_100
    )
    assert (resumed.state, resumed.next_tick_ms, resumed.next_due_ms, resumed.updated_at_ms) == (
        ScheduleState.ACTIVE,
        9_000,
        9_100,
        60,
    )
    with pytest.raises(InvalidArgument):  # a tick without its due instant
        store.set_state("job", ScheduleState.ACTIVE, now_ms=70, next_tick_ms=9_000)
    with pytest.raises(InvalidArgument):  # only an active schedule is ever due
        store.set_state("job", ScheduleState.PAUSED, now_ms=70, next_due_ms=9_000)
    with pytest.raises(ScheduleNotFound, match="nope"):
        store.set_state("nope", ScheduleState.PAUSED, now_ms=1)


def test_delete_keeps_history(store: Store) -> None:
    add(store, "job", 1_000)
    store.settle([enqueued("job", 1_000)], (), epoch=0)
    assert store.delete("JOB") is True
    assert store.delete("job") is False
    assert store.get("job") is None
    assert len(store.history("job", limit=10)) == 1
    assert store.find_enqueued(tick_task_id("job", 1_000)) is not None


def test_list_schedules_includes_archived_ordered_by_name(store: Store) -> None:
    for name in ("b", "C", "a"):
        add(store, name, 1_000)
    store.set_state("C", ScheduleState.ARCHIVED, now_ms=1)
    records = store.list_schedules()
    assert [record.name for record in records] == ["a", "b", "C"]
    assert records[2].state is ScheduleState.ARCHIVED


def test_history_pages_are_disjoint_newest_first_with_run_state(store: Store) -> None:
    store.settle([enqueued("job", tick) for tick in range(25)], (), epoch=0)
    store.settle([enqueued("other", 1)], (), epoch=0)
    first = store.history("job", limit=10)
    second = store.history("job", limit=10, before_id=first[-1].id)
    third = store.history("job", limit=10, before_id=second[-1].id)
    pages = [first, second, third]
    ids = [event.id for page in pages for event in page]
    assert [len(page) for page in pages] == [10, 10, 5]
    assert ids == sorted(ids, reverse=True)
    assert len(set(ids)) == 25
    assert [event.tick_ms for event in first[:2]] == [24, 23]
    with pytest.raises(InvalidArgument):
        store.history("job", limit=0)

    task_id = tick_task_id("job", 24)
    track_run(store)(task_id, 24, "succeeded")
    assert store.history("job", limit=1)[0].run_state == "succeeded"
    found = store.find_enqueued(task_id)
    assert found is not None
    assert (found.tick_ms, found.run_state) == (24, "succeeded")
    assert store.find_enqueued("job@nowhere") is None


def test_prune_history_keeps_the_newest_per_schedule(store: Store) -> None:
    store.settle([enqueued("job", tick) for tick in range(12)], (), epoch=0)
    store.settle([enqueued("Other", tick) for tick in range(3)], (), epoch=0)
    assert store.prune_history(["job", "other", "never-ran"], keep=5) == 7
    assert [event.tick_ms for event in store.history("job", limit=50)] == [11, 10, 9, 8, 7]
    assert len(store.history("other", limit=50)) == 3
    assert store.prune_history(["job"], keep=5) == 0
    assert store.prune_history(["job"], keep=0) == 4  # the newest enqueued record stays
    assert [event.tick_ms for event in store.history("job", limit=50)] == [11]
    with pytest.raises(InvalidArgument):
        store.prune_history(["job"], keep=-1)


def test_prune_history_keeps_what_the_round_relies_on(store: Store) -> None:
    add(store, "job", 100)  # next tick 100: records at or after it prove a pending tick
    skipped = AuditEvent("job", 0, None, Trigger.AUTO, Outcome.SKIPPED, reason="overlap")
    store.settle([enqueued("job", 50), enqueued("job", 100), enqueued("job", 101)], (), epoch=0)
    store.settle([skipped] * 5, (), epoch=0)  # a blocked skip schedule writes one per round
    store.prune_history(["job"], keep=2)
    kept = [(e.tick_ms, e.outcome.value) for e in store.history("job", limit=50)]
    assert (100, "enqueued") in kept and (101, "enqueued") in kept
    assert (50, "enqueued") not in kept  # before the next tick and not the newest: prunable


def test_prune_history_keeps_a_record_the_redelivery_sweep_watches(store: Store) -> None:
    add(store, "job", 10_000)  # every record below is before the next tick: prunable by age
    store.register_epoch(1)
    store.settle([enqueued("job", 1_000, recheck_ms=5_000)], (), epoch=1)  # watched
    store.settle([enqueued("job", tick) for tick in range(2_000, 2_010)], (), epoch=1)
    store.prune_history(["job"], keep=0)
    kept = [e.tick_ms for e in store.history("job", limit=50)]
    assert kept == [2_009, 1_000]  # the newest enqueued one, and the watched one
    (c,) = store.redelivery_candidates(5_000, 10)
    assert c.tick_ms == 1_000  # still found: pruned, a lost tick would never be sent again
    store.settle_redeliveries((), [Recheck(c.record_id, None, c.sent_ms, 0)], epoch=1)
    store.prune_history(["job"], keep=0)  # its watch ended: prunable like any other
    assert [e.tick_ms for e in store.history("job", limit=50)] == [2_009]


def test_counts_by_state_lists_every_state(store: Store) -> None:
    assert store.counts_by_state() == {"active": 0, "paused": 0, "archived": 0, "quarantined": 0}
    add(store, "a", 1_000)
    add(store, "b", 1_000, enabled=False)
    assert store.counts_by_state() == {"active": 1, "paused": 1, "archived": 0, "quarantined": 0}


def test_due_backlog_counts_due_active_rows(store: Store) -> None:
    add(store, "a", 1_000)
    add(store, "b", 2_000)
    add(store, "c", 9_000)
    assert store.due_backlog(2_000) == 2
    assert store.due_backlog(0) == 0


# -- connections ----------------------------------------------------------------------------------
def test_construction_does_not_connect_and_failures_hide_the_password() -> None:
    store = SqlStore("postgres://beat:s3cret@127.0.0.1:1/nowhere")
    assert store.url.startswith("postgresql+psycopg://")
    with pytest.raises(StoreUnavailable) as caught:
        store.now_ms()
    message = str(caught.value)
    assert "s3cret" not in message
    assert "127.0.0.1:1/nowhere" in message
    store.close()
    store.close()


def test_sqlite_in_a_missing_folder_fails_clearly(tmp_path: object) -> None:
    store = SqlStore(f"sqlite:///{tmp_path}/missing/store.sqlite3")
    with pytest.raises(StoreUnavailable, match="does not exist"):
        store.ensure_schema()


def test_unsupported_backend_is_refused_at_construction() -> None:
    with pytest.raises(InvalidArgument, match="mysql"):
        SqlStore("mysql://root@localhost/beat")


def test_lookups_of_impossible_names_find_nothing(store: Store) -> None:
    assert store.get("x" * 500) is None
    assert store.history("", limit=5) == []
    assert store.delete("x" * 500) is False


def test_page_schedules_filters_by_plain_text_and_state_in_name_order(store: Store) -> None:
    for name in ("Gamma", "beta_1", "beta%2", "Alpha", "alphabet", "betaX1"):
        add(store, name, MINUTE)
    store.set_state("alphabet", ScheduleState.PAUSED, 0)

    def names(
        contains: str, state: ScheduleState | None = None, offset: int = 0, limit: int = 10
    ) -> tuple[list[str], int]:
        records, matched = store.page_schedules(contains, state, offset, limit)
        return [r.name for r in records], matched

    assert names("") == (["Alpha", "alphabet", "beta%2", "beta_1", "betaX1", "Gamma"], 6)
    assert names("ALPHA") == (["Alpha", "alphabet"], 2)
    assert names("beta_") == (["beta_1"], 1)  # "_" is a character, not a wildcard
    assert names("%") == (["beta%2"], 1)
    assert names("", ScheduleState.PAUSED) == (["alphabet"], 1)
    assert names("a", ScheduleState.ACTIVE, offset=1, limit=2) == (["beta%2", "beta_1"], 5)
    assert names("nothing") == ([], 0)


def redelivery_record(name: str, tick_ms: int, n: int) -> AuditEvent:
    return replace(enqueued(name, tick_ms), trigger=Trigger.REDELIVER, detail={"redelivery": n})


def test_rule_11_watched_ticks_come_back_when_due_earliest_first(store: Store) -> None:
    add(store, "job", 1_000)
    store.register_epoch(1)
    store.settle(
        [
            enqueued("job", 1_000, recheck_ms=5_000, version=1),
            enqueued("job", 2_000, recheck_ms=4_000, version=1),
            enqueued("job", 3_000),  # not watched: redelivery was off
        ],
        (),
        epoch=1,
    )
    assert store.redelivery_candidates(3_999, 10) == []
    found = store.redelivery_candidates(5_000, 10)
    assert [c.tick_ms for c in found] == [2_000, 1_000]
    first = found[0]
    assert (first.task_id, first.redeliveries, first.version, first.schedule_version) == (
        tick_task_id("job", 2_000),
        0,
        1,
        1,
    )
    assert first.sent_ms == first.recorded_at_ms
    assert first.definition is not None and first.definition.name == "job"
    assert [c.tick_ms for c in store.redelivery_candidates(5_000, 1)] == [2_000]


def test_rule_11_redeliveries_are_recorded_beside_the_first_record_and_fenced(
    store: Store,
) -> None:
    add(store, "job", 1_000)
    store.register_epoch(1)
    store.settle([enqueued("job", 1_000, recheck_ms=5_000)], (), epoch=1)
    (c,) = store.redelivery_candidates(5_000, 10)
    store.settle_redeliveries(
        [redelivery_record("job", 1_000, 1)],
        [Recheck(c.record_id, 20_000, 6_000, 1)],
        epoch=1,
    )
    assert store.redelivery_candidates(19_999, 10) == []
    (again,) = store.redelivery_candidates(20_000, 10)
    assert (again.sent_ms, again.redeliveries) == (6_000, 1)
    history = store.history("job", 10)
    assert [(e.trigger, e.outcome, e.task_id) for e in history] == [
        (Trigger.REDELIVER, Outcome.ENQUEUED, c.task_id),
        (Trigger.AUTO, Outcome.ENQUEUED, c.task_id),
    ]
    found = store.find_enqueued(c.task_id)
    assert found is not None and found.trigger is Trigger.AUTO  # the first record, rule 3
    store.settle([enqueued("job", 1_000)], (), epoch=1)  # a replay is still ignored
    assert len(store.history("job", 10)) == 2
    store.register_epoch(2)
    with pytest.raises(StaleEpoch):
        store.settle_redeliveries(
            [redelivery_record("job", 1_000, 2)], [Recheck(c.record_id, None, 7_000, 2)], epoch=1
        )
    with pytest.raises(StaleEpoch):
        store.settle_redeliveries((), [Recheck(c.record_id, None, 7_000, 2)], epoch=1)
    assert len(store.history("job", 10)) == 2
    assert len(store.redelivery_candidates(20_000, 10)) == 1
    store.settle_redeliveries((), [Recheck(c.record_id, None, 6_000, 1)], epoch=2)
    assert store.redelivery_candidates(10**12, 10) == []
