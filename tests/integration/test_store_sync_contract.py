"""Store rules 7 and 8 (``store/base.py``): config sync in fenced bulk batches, pruning in
bounded statements, held against SQLite, PostgreSQL and the in-memory store alike.

The statement counts are read from SQLAlchemy's ``before_cursor_execute`` event: what the issue
measured (one round trip per entry, one DELETE per schedule) is what they pin down.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, literal_column, select, update

from celery_durable_beat.exceptions import InvalidArgument, StaleEpoch
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Definition, Outcome, Reason, ScheduleState, Source, Trigger
from celery_durable_beat.schedules.spec import AtSpec, IntervalSpec
from celery_durable_beat.store.base import AuditEvent, ConfigChange, Store
from celery_durable_beat.store.sql import SqlStore, config_sync
from celery_durable_beat.store.tables import CONFIG_ROWS, DEFAULT_NAMESPACE, fence, schedules
from celery_durable_beat.sync import sync_definitions

pytestmark = pytest.mark.integration

MINUTE = 60_000


def definition(name: str, every_ms: int = MINUTE, **extra: Any) -> Definition:
    return Definition(name=name, task="tasks.work", spec=IntervalSpec(every_ms), **extra)


def change(name: str, first_tick_ms: int = MINUTE, **extra: Any) -> ConfigChange:
    return ConfigChange(name, definition(name, **extra), first_tick_ms)


@contextmanager
def counted(store: SqlStore) -> Iterator[list[str]]:
    """Every statement the store sends while the block runs (an executemany counts once)."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    engine = store._get_engine()
    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


def test_sync_config_creates_updates_archives_and_reads_digests(store: Store) -> None:
    results = store.sync_config([change("A"), change("b")], epoch=0, now_ms=10)
    assert [(r.name, r.status, r.version) for r in results] == [
        ("A", "created", 1),
        ("b", "created", 1),
    ]
    digests = {d.name: d for d in store.definition_digests([])}
    assert set(digests) == {"A", "b"} and digests["A"].source is Source.CONFIG
    assert digests["A"].definition_hash == definition("A").definition_hash()

    results = store.sync_config(
        [change("a", 5 * MINUTE, every_ms=2 * MINUTE), ConfigChange("B")], epoch=0, now_ms=20
    )
    assert [(r.status, r.version) for r in results] == [("updated", 2), ("archived", 1)]
    a, b = store.get("a"), store.get("b")
    assert a is not None and (a.version, a.next_tick_ms, a.state) == (
        2,
        5 * MINUTE,
        ScheduleState.ACTIVE,
    )
    assert b is not None and b.state is ScheduleState.ARCHIVED and b.next_due_ms is None
    same = store.sync_config([change("a", 9 * MINUTE, every_ms=2 * MINUTE)], epoch=0, now_ms=30)
    assert same[0].status == "unchanged" and store.get("a").next_tick_ms == 5 * MINUTE  # type: ignore[union-attr]
    with pytest.raises(InvalidArgument):
        store.sync_config([change("x"), change("X")], epoch=0, now_ms=40)


def test_digests_are_the_config_rows_and_the_rows_named_never_every_row(store: Store) -> None:
    """Rule 7: sync reads what the config owns or names, so API schedules it does not name
    cost it nothing however many are stored; an archived config row is read only when named."""
    for name in ("api-1", "api-2", "Api-Named"):
        store.upsert(definition(name), Source.API, 1_000, now_ms=0)
    store.sync_config([change("cfg"), change("gone")], epoch=0, now_ms=1)
    store.sync_config([ConfigChange("gone")], epoch=0, now_ms=2)  # archived
    assert {d.name for d in store.definition_digests([])} == {"cfg"}
    named = {d.name: d for d in store.definition_digests(["api-named", "GONE", "missing"])}
    assert set(named) == {"cfg", "Api-Named", "gone"}
    assert named["Api-Named"].source is Source.API
    assert named["gone"].state is ScheduleState.ARCHIVED


def test_sync_reads_the_config_rows_through_their_index(pg_store: SqlStore) -> None:
    """On PostgreSQL the config rows can be found by the partial index (the query's predicate
    matches it), not only by a scan of the table."""
    pg_store.sync_config([change("cfg")], epoch=0, now_ms=1)
    query = select(schedules.c.name).where(
        CONFIG_ROWS, schedules.c.state != literal_column("'archived'")
    )
    with pg_store._get_engine().connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")
        sql = str(query.compile(conn, compile_kwargs={"literal_binds": True}))
        plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql))
    assert "ix_durable_beat_schedules_config_namespace_name_key" in plan, plan


def test_sync_config_never_touches_an_api_schedule(store: Store) -> None:
    store.upsert(definition("shared"), Source.API, 1_000, now_ms=0)
    results = store.sync_config([change("shared", every_ms=5 * MINUTE)], epoch=0, now_ms=1)
    assert results[0].status == "ignored"
    kept = store.get("shared")
    assert kept is not None and kept.source is Source.API and kept.version == 1
    gone = store.sync_config([ConfigChange("shared")], epoch=0, now_ms=2)  # never archived either
    assert gone[0].status == "unchanged"
    kept = store.get("shared")
    assert kept is not None and kept.state is ScheduleState.ACTIVE


def test_an_api_schedule_created_after_the_read_is_left_alone(
    sql_store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the INSERT's ON CONFLICT covers (COPY + INSERT … SELECT on PostgreSQL): the
    API creates the row between sync's read of the batch and its insert."""
    sql_store.upsert(definition("raced", every_ms=7 * MINUTE), Source.API, 1_000, now_ms=0)
    monkeypatch.setattr(config_sync, "_rows", lambda _conn, _ns, _keys: {})  # read before the API
    results = sql_store.sync_config([change("raced"), change("fresh")], epoch=0, now_ms=1)
    assert [(r.name, r.status) for r in results] == [("raced", "ignored"), ("fresh", "created")]
    raced, fresh = sql_store.get("raced"), sql_store.get("fresh")
    assert raced is not None and raced.source is Source.API and raced.version == 1
    assert raced.definition == definition("raced", every_ms=7 * MINUTE)
    assert fresh is not None and fresh.definition == definition("fresh")
    assert fresh.definition_hash == definition("fresh").definition_hash()


def test_sync_config_with_a_stale_epoch_is_refused_and_writes_nothing(store: Store) -> None:
    store.sync_config([change("kept")], epoch=3, now_ms=0)
    store.register_epoch(5)
    with pytest.raises(StaleEpoch):
        store.sync_config([change("new"), ConfigChange("kept")], epoch=4, now_ms=1)
    assert store.get("new") is None
    kept = store.get("kept")
    assert kept is not None and kept.state is ScheduleState.ACTIVE
    assert store.sync_config([change("new")], epoch=5, now_ms=2)[0].status == "created"


def test_a_replan_dropping_a_due_tick_records_replanned(store: Store) -> None:
    store.sync_config([change("job", first_tick_ms=MINUTE)], epoch=1, now_ms=0)
    now = MINUTE + 30_000  # the tick at one minute is due and not yet dispatched
    store.sync_config([change("job", 3 * MINUTE, every_ms=2 * MINUTE)], epoch=1, now_ms=now)
    [dropped] = store.history("job", limit=10)
    assert (dropped.outcome, dropped.reason) == (Outcome.SKIPPED, Reason.REPLANNED.value)
    assert (dropped.tick_ms, dropped.version, dropped.epoch, dropped.task_id) == (
        MINUTE,
        1,
        1,
        None,
    )
    # a change while nothing is due drops nothing, and neither does a paused schedule's
    store.sync_config([change("job", 9 * MINUTE, every_ms=3 * MINUTE)], epoch=1, now_ms=now)
    store.set_state("job", ScheduleState.PAUSED, now)
    store.sync_config([change("job", 9 * MINUTE)], epoch=1, now_ms=20 * MINUTE)
    assert len(store.history("job", limit=10)) == 1


def test_creating_an_at_already_past_records_one_missed_skip(store: Store) -> None:
    """SPEC §15, rules 7 and 9: an ``@at`` already past when its schedule is created (config
    sync or upsert) has no next tick and one ``skipped``/``missed`` record; a second sync or
    upsert of the same definition records nothing more, and one still ahead records nothing."""
    past = AtSpec(5 * MINUTE)
    gone = Definition(name="gone", task="tasks.work", spec=past)
    store.sync_config([ConfigChange("gone", gone, None)], epoch=1, now_ms=10 * MINUTE)
    store.sync_config([ConfigChange("gone", gone, None)], epoch=1, now_ms=11 * MINUTE)
    by_api = Definition(name="by-api", task="tasks.work", spec=past)
    store.upsert(by_api, Source.API, None, 10 * MINUTE)
    store.upsert(by_api, Source.API, None, 11 * MINUTE)
    for name in ("gone", "by-api"):
        [event] = store.history(name, limit=10)
        assert (event.outcome, event.reason, event.tick_ms, event.trigger) == (
            Outcome.SKIPPED,
            Reason.MISSED.value,
            5 * MINUTE,
            Trigger.AUTO,
        )
        record = store.get(name)
        assert record is not None and record.next_tick_ms is None
        assert record.state is ScheduleState.ACTIVE
    ahead = Definition(name="ahead", task="tasks.work", spec=AtSpec(20 * MINUTE))
    store.sync_config([ConfigChange("ahead", ahead, 20 * MINUTE)], epoch=1, now_ms=10 * MINUTE)
    assert store.history("ahead", limit=10) == []


def test_a_sync_costs_statements_per_batch_not_per_entry(sql_store: SqlStore) -> None:
    store = sql_store
    wanted = [definition(f"s-{i:04d}") for i in range(1_200)]
    renewals: list[int] = []

    def renew() -> bool:
        renewals.append(1)
        return True

    with counted(store) as first:
        report = sync_definitions(store, wanted, 0, epoch=0, renew=renew, batch_size=500)
    assert len(report.created) == 1_200 and len(renewals) == 3  # one renewal before each batch
    assert len(first) <= 3 * 10 + 5, first[:20]  # per entry, this was ~3,600
    with counted(store) as restart:
        report = sync_definitions(store, wanted, 10, epoch=0, renew=renew, batch_size=500)
    assert len(report.unchanged) == 1_200 and len(renewals) == 3  # nothing to write: no batch
    assert len(restart) <= 3, restart


def test_a_prune_costs_one_statement_per_chunk_of_schedules(sql_store: SqlStore) -> None:
    names = [f"job-{i:03d}" for i in range(300)]
    events = [
        AuditEvent(name, tick, tick_task_id(name, tick), Trigger.AUTO, Outcome.ENQUEUED)
        for name in names
        for tick in range(4)
    ]
    sql_store.settle(events, (), epoch=0)
    with counted(sql_store) as seen:
        assert sql_store.prune_history(names, keep=2) == 300 * 2
    assert len([s for s in seen if s.lstrip().upper().startswith("DELETE")]) == 1
    assert [e.tick_ms for e in sql_store.history("job-007", limit=10)] == [3, 2]


def test_postgresql_orders_sync_after_an_epoch_bump_it_waited_for(pg_store: SqlStore) -> None:
    """The fence is checked under its row lock, never by a read before the write: a bump that is
    in flight while the sync starts is waited for, and then refuses the sync."""
    pg_store.register_epoch(5)
    outcome: list[object] = []
    with pg_store._get_engine().connect() as bumper:
        tx = bumper.begin()
        bumper.execute(update(fence).where(fence.c.namespace == DEFAULT_NAMESPACE).values(epoch=6))

        def sync() -> None:
            try:
                outcome.append(pg_store.sync_config([change("late")], epoch=5, now_ms=0))
            except StaleEpoch as exc:
                outcome.append(exc)

        worker = threading.Thread(target=sync)
        worker.start()
        worker.join(timeout=0.5)
        assert worker.is_alive(), "the sync did not wait for the epoch bump in flight"
        tx.commit()
        worker.join(timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], StaleEpoch)
    assert pg_store.get("late") is None
