"""Config sync (SPEC §3) on the in-memory store; the upserts it relies on are held to the SQL
stores' behaviour by the store contract suite."""

from __future__ import annotations

import pytest

from celery_durable_beat.exceptions import StaleEpoch
from celery_durable_beat.model import Outcome, Reason, ScheduleState, Source
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.store.base import Store
from celery_durable_beat.sync import sync_definitions

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000


def test_create_unchanged_changed(store: Store) -> None:
    entry = {"task": "t", "schedule": "@every 60s"}
    report = sync_definitions(store, validate_entries({"Nightly": entry}), T0)
    assert report.created == ["Nightly"]
    first = store.get("nightly")
    assert first is not None and first.version == 1 and first.source is Source.CONFIG
    assert first.next_tick_ms == (T0 // 60_000 + 1) * 60_000  # epoch-aligned minute after T0

    report = sync_definitions(store, validate_entries({"NIGHTLY": entry}), T0 + 500_000)
    assert report.unchanged == ["NIGHTLY"]
    same = store.get("nightly")
    assert (same.version, same.next_tick_ms) == (1, first.next_tick_ms)

    changed = {**entry, "kwargs": {"x": 1}}
    report = sync_definitions(store, validate_entries({"Nightly": changed}), T0 + 500_000)
    assert report.updated == ["Nightly"]
    updated = store.get("nightly")
    assert updated.version == 2
    assert updated.next_tick_ms == ((T0 + 500_000) // 60_000 + 1) * 60_000  # re-planned from now


def test_removed_is_archived_and_comes_back(store: Store) -> None:
    a = {"task": "t", "schedule": "@every 60s"}
    sync_definitions(store, validate_entries({"a": a, "b": a}), T0)
    report = sync_definitions(store, validate_entries({"a": a}), T0 + 1000)
    assert report.archived == ["b"]
    archived = store.get("b")
    assert archived.state is ScheduleState.ARCHIVED and archived.next_due_ms is None
    sync_definitions(store, validate_entries({"a": a, "b": a}), T0 + 2000)
    back = store.get("b")
    assert back.state is ScheduleState.ACTIVE and back.next_due_ms is not None


def test_api_schedules_are_never_touched(store: Store) -> None:
    api_def = validate_entries({"manual": {"task": "t", "schedule": "@every 5s"}})[0]
    store.upsert(api_def, Source.API, T0 + 5000, T0)
    config = validate_entries({"manual": {"task": "other", "schedule": "@every 9s"}})
    report = sync_definitions(store, config, T0 + 1000)
    assert report.ignored == ["manual"]
    kept = store.get("manual")
    assert kept.source is Source.API and kept.definition.task == "t" and kept.version == 1
    sync_definitions(store, [], T0 + 2000)
    assert store.get("manual").state is ScheduleState.ACTIVE  # not archived by config


def test_disabled_entry_is_paused(store: Store) -> None:
    sync_definitions(
        store,
        validate_entries({"off": {"task": "t", "schedule": "@every 5s", "enabled": False}}),
        T0,
    )
    off = store.get("off")
    assert off.state is ScheduleState.PAUSED and off.next_due_ms is None


def test_an_operator_pause_survives_a_changed_definition(store: Store) -> None:
    entry = {"task": "t", "schedule": "@every 5s"}
    sync_definitions(store, validate_entries({"p": entry}), T0)
    store.set_state("p", ScheduleState.PAUSED, T0 + 1000, next_tick_ms=None)
    sync_definitions(store, validate_entries({"p": {**entry, "args": [1]}}), T0 + 2000)
    changed = store.get("p")
    assert changed.version == 2
    assert changed.state is ScheduleState.PAUSED and changed.next_due_ms is None
    sync_definitions(store, validate_entries({"p": {**entry, "args": [1], "enabled": False}}), T0)
    sync_definitions(store, validate_entries({"p": {**entry, "args": [1], "enabled": True}}), T0)
    assert store.get("p").state is ScheduleState.ACTIVE  # config toggled enabled: config wins


def test_sync_writes_in_batches_renewing_before_each_and_stops_without_the_lease(
    store: Store,
) -> None:
    wanted = validate_entries(
        {f"s{i:03d}": {"task": "t", "schedule": "@every 60s"} for i in range(25)}
    )
    answers = [True, True, False]
    calls: list[int] = []

    def renew() -> bool:
        calls.append(len(store.list_schedules()))  # what was written before this renewal
        return answers[len(calls) - 1]

    report = sync_definitions(store, wanted, T0, epoch=0, renew=renew, batch_size=10)
    assert calls == [0, 10, 20] and not report.complete
    assert len(report.created) == 20 and len(store.list_schedules()) == 20
    report = sync_definitions(store, wanted, T0, epoch=0, renew=lambda: True, batch_size=10)
    assert report.complete and len(report.created) == 5 and len(report.unchanged) == 20


def test_a_sync_under_a_superseded_epoch_is_refused(store: Store) -> None:
    store.register_epoch(7)
    with pytest.raises(StaleEpoch):
        sync_definitions(
            store, validate_entries({"a": {"task": "t", "schedule": "@every 5s"}}), T0, epoch=6
        )
    assert store.get("a") is None


def test_a_changed_definition_dropping_a_due_tick_records_replanned(store: Store) -> None:
    entry = {"task": "t", "schedule": "@every 60s"}
    sync_definitions(store, validate_entries({"job": entry}), T0)
    due = store.get("job")
    assert due is not None and due.next_tick_ms is not None
    later = due.next_tick_ms + 5_000  # due, and beat was down: nothing dispatched it
    report = sync_definitions(store, validate_entries({"job": {**entry, "args": [1]}}), later)
    assert report.updated == ["job"]
    [event] = store.history("job", limit=5)
    assert (event.outcome, event.reason, event.tick_ms) == (
        Outcome.SKIPPED,
        Reason.REPLANNED.value,
        due.next_tick_ms,
    )
