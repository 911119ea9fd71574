"""Fencing inside the write (SPEC §7, issue #10 item 2), on PostgreSQL.

A leader that stalls after its last check and before its write must not write once a newer epoch
has been registered meanwhile. The stall is the ``fenced_write`` fault point, paused in process
(``faults.paused_at``) while a second store — the new leader's process — registers the next
epoch: deterministic, no sleeping. PostgreSQL only: on SQLite every write transaction begins
IMMEDIATE, so an epoch bump cannot commit between a write's check and its statements (the bump
waits for the write lock), and the in-memory store writes under one lock.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from celery_durable_beat import faults
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import StaleEpoch
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.store.sql import SqlStore
from tests.integration.test_store_contract import add, enqueued, moved

pytestmark = pytest.mark.integration

OLD, NEW = 3, 4


@pytest.fixture
def stores(pg_url: str) -> Iterator[tuple[SqlStore, SqlStore]]:
    """The old leader's store and the new leader's, on one database."""
    old, new = SqlStore(pg_url), SqlStore(pg_url)
    old.ensure_schema()
    old.register_epoch(OLD)
    yield old, new
    old.close()
    new.close()


def _new_leader_acquires(new: SqlStore) -> None:
    new.register_epoch(NEW)


def test_a_round_stalled_before_its_write_writes_nothing_under_the_old_epoch(
    stores: tuple[SqlStore, SqlStore],
) -> None:
    old, new = stores
    add(old, "job", 1_000)
    dispatcher = Dispatcher(old, CapturingPublisher())
    with (
        faults.paused_at("fenced_write", lambda: _new_leader_acquires(new)),
        pytest.raises(StaleEpoch),
    ):
        dispatcher.run_round(5_000, OLD)
    assert new.leader_info().epoch == NEW
    assert new.history("job", limit=10) == []  # no audit record under the old epoch
    record = new.get("job")
    assert record is not None
    assert (record.next_tick_ms, record.last_tick_ms) == (1_000, None)  # not advanced


def test_an_advance_stalled_after_its_check_is_refused(stores: tuple[SqlStore, SqlStore]) -> None:
    old, new = stores
    schedule_id = add(old, "job", 1_000)
    with (
        faults.paused_at("fenced_write", lambda: _new_leader_acquires(new)),
        pytest.raises(StaleEpoch),
    ):
        old.settle((), [moved(schedule_id, 1_000, 61_000)], epoch=OLD)
    record = new.get("job")
    assert record is not None
    assert record.next_tick_ms == 1_000


def test_an_audit_write_stalled_after_its_check_is_refused(
    stores: tuple[SqlStore, SqlStore],
) -> None:
    old, new = stores
    add(old, "job", 1_000)
    with (
        faults.paused_at("fenced_write", lambda: _new_leader_acquires(new)),
        pytest.raises(StaleEpoch),
    ):
        old.settle([enqueued("job", 1_000)], (), epoch=OLD)
    assert new.history("job", limit=10) == []


def test_the_current_leader_writes_through_the_pause_point(
    stores: tuple[SqlStore, SqlStore],
) -> None:
    old, new = stores
    schedule_id = add(old, "job", 1_000)
    with faults.paused_at("fenced_write", lambda: None):
        old.settle([enqueued("job", 1_000)], (), epoch=OLD)
        assert old.settle((), [moved(schedule_id, 1_000, 61_000)], epoch=OLD) == [True]
    [event] = new.history("job", limit=10)
    assert event.epoch == OLD
