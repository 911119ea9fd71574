"""The dispatch round against the real SQL stores, where the database is what the test is about:
a restart that reads what another process wrote, a stored definition this version cannot read.

The round's logic (order, dedup, failures, quarantine) is tested on the in-memory store in
``tests/unit/test_dispatch.py``.
"""

from __future__ import annotations

import pytest

from celery_durable_beat.dispatch import Dispatcher, TickMessage
from celery_durable_beat.model import ScheduleState
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.sync import sync_definitions

pytestmark = pytest.mark.integration

T0 = 1_780_000_000_000  # a whole second, 2026-05-28
EPOCH = 1


@pytest.fixture
def leader_epoch() -> int:
    return EPOCH


def _defs(**entries: dict[str, object]) -> list:  # type: ignore[type-arg]
    return validate_entries(entries)


def _round(store: SqlStore, publisher: CapturingPublisher, now_ms: int) -> list[TickMessage]:
    before = len(publisher.messages)
    Dispatcher(store, publisher, quarantine_after=3).run_round(now_ms, EPOCH)
    return publisher.messages[before:]


def test_restart_continues_without_gap_or_duplicate(sql_store: SqlStore) -> None:
    store = sql_store
    sync_definitions(
        store, _defs(s={"task": "t", "schedule": "@every 1s", "missed": "backfill"}), T0
    )
    pub = CapturingPublisher()
    for second in range(1, 4):
        _round(store, pub, T0 + second * 1000)
    store.close()
    again = SqlStore(store.url)  # a new beat process on the same database
    try:
        for second in range(4, 7):
            _round(again, pub, T0 + second * 1000)
    finally:
        again.close()
    ticks = [m.tick_ms for m in pub.messages]
    assert ticks == [T0 + s * 1000 for s in range(1, 7)]


def test_an_unplannable_schedule_is_quarantined_alone(sql_store: SqlStore) -> None:
    store = sql_store
    from sqlalchemy import update

    from celery_durable_beat.store.tables import schedules

    sync_definitions(
        store,
        _defs(
            broken={"task": "t", "schedule": "0 * * * *", "tz": "Europe/Berlin"},
            fine={"task": "t", "schedule": "@every 1s"},
        ),
        T0,
    )
    row = store.get("broken")
    assert row is not None
    stored = row.definition.to_json()
    stored["schedule"]["tz"] = "Atlantis/Capital"  # a zone this tzdata does not know
    with store._get_engine().begin() as conn:
        conn.execute(
            update(schedules)
            .where(schedules.c.id == row.id)
            .values(definition=stored, next_due_ms=T0, next_tick_ms=T0)
        )
    pub = CapturingPublisher()
    sent = _round(store, pub, T0 + 1_000)
    assert [m.schedule for m in sent] == ["fine"]
    broken = store.get("broken")
    assert broken.state is ScheduleState.QUARANTINED
    assert store.history("broken", 5)[0].reason == "quarantined"
    assert [m.schedule for m in _round(store, pub, T0 + 2_000)] == ["fine"]
