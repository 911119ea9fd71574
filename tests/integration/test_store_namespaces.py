"""Namespaces on one SQL store (SPEC §16, store rule 7a): two apps' stores on the same database
never see, fence, lead for, archive or prune each other's rows, and the default namespace keeps
the rows, ids and keys it always had.

Each test opens the namespaces ``alpha`` and ``beta`` (and the default) as separate ``SqlStore``
objects on one fresh database, as two apps with ``durable_beat_namespace`` set do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import create_engine, select

from celery_durable_beat.exceptions import StaleEpoch
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.lease.sql import StoreLease
from celery_durable_beat.model import Definition, OperatorAction, Outcome, Source, Trigger
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.store.base import ActionEntry, Advance, AuditEvent, ConfigChange, Store
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.tables import actions, audit, fence, schedules
from celery_durable_beat.sync import sync_definitions

pytestmark = pytest.mark.integration

MINUTE = 60_000
T0 = 1_780_000_020_000


def definition(name: str, task: str = "tasks.work") -> Definition:
    return Definition(name=name, task=task, spec=IntervalSpec(MINUTE))


@pytest.fixture
def opened(store_url: str) -> Iterator[Callable[[str | None], SqlStore]]:
    """``opened(namespace)``: a store of that namespace on the test's one database."""
    made: list[SqlStore] = []

    def open_store(namespace: str | None) -> SqlStore:
        store = SqlStore(store_url, namespace=namespace)
        store.ensure_schema()
        made.append(store)
        return store

    yield open_store
    for store in made:
        store.close()


def enqueued(store: SqlStore, name: str, tick_ms: int) -> AuditEvent:
    return AuditEvent(
        schedule=name,
        tick_ms=tick_ms,
        task_id=tick_task_id(name, tick_ms, store.namespace),
        trigger=Trigger.AUTO,
        outcome=Outcome.ENQUEUED,
    )


def test_the_same_name_is_two_schedules_in_two_namespaces(
    opened: Callable[[str | None], SqlStore],
) -> None:
    alpha, beta, default = opened("alpha"), opened("beta"), opened(None)
    assert alpha.upsert(definition("nightly", "a.task"), Source.API, T0, 0).status == "created"
    assert beta.upsert(definition("Nightly", "b.task"), Source.API, T0, 0).status == "created"
    alpha_row, beta_row = alpha.get("nightly"), beta.get("NIGHTLY")
    assert alpha_row is not None and beta_row is not None
    assert (alpha_row.definition.task, beta_row.definition.task) == ("a.task", "b.task")
    assert default.get("nightly") is None
    assert [r.name for r in alpha.list_schedules()] == ["nightly"]
    assert default.list_schedules() == []
    assert alpha.counts_by_state()["active"] == 1 and default.counts_by_state()["active"] == 0
    assert beta.delete("nightly") and alpha.get("nightly") is not None


def test_each_namespace_claims_only_its_own_due_rows(
    opened: Callable[[str | None], SqlStore],
) -> None:
    alpha, beta = opened("alpha"), opened("beta")
    alpha.upsert(definition("job"), Source.CONFIG, T0, 0)
    beta.upsert(definition("job"), Source.CONFIG, T0 + MINUTE, 0)
    beta.upsert(definition("other"), Source.CONFIG, T0 + 2 * MINUTE, 0)
    now = T0 + 5 * MINUTE
    with alpha.claim_due(now, 10) as claim:
        assert [(d.name, d.next_tick_ms, d.namespace) for d in claim.schedules] == [
            ("job", T0, "alpha")
        ]
    with beta.claim_due(now, 10) as claim:
        assert [d.name for d in claim.schedules] == ["job", "other"]
    assert alpha.earliest_due_ms() == T0 and beta.earliest_due_ms() == T0 + MINUTE
    assert alpha.due_backlog(now) == 1 and beta.due_backlog(now) == 2


def test_each_namespace_has_its_own_fence_and_lease(
    opened: Callable[[str | None], SqlStore],
) -> None:
    """Both namespaces lead at once; an epoch registered in one fences nothing of the other."""
    alpha, beta = opened("alpha"), opened("beta")
    lead_a = StoreLease(alpha, ttl_seconds=30, holder="a").acquire_or_renew()
    lead_b = StoreLease(beta, ttl_seconds=30, holder="b").acquire_or_renew()
    assert lead_a.leader and lead_b.leader
    assert StoreLease(alpha, ttl_seconds=30, holder="a2").acquire_or_renew().leader is False
    assert alpha.leader_info().holder == "a" and beta.leader_info().holder == "b"
    alpha.register_epoch(7)
    beta_id = beta.upsert(definition("job"), Source.CONFIG, T0, 0)
    assert beta_id.status == "created"
    row = beta.get("job")
    assert row is not None
    advance = Advance(
        row.id,
        T0,
        T0 + MINUTE,
        next_due_ms=T0 + MINUTE,
        last_tick_ms=T0,
        last_outcome=Outcome.ENQUEUED,
        failures=0,
    )
    assert beta.settle([enqueued(beta, "job", T0)], [advance], lead_b.epoch) == [True]
    with pytest.raises(StaleEpoch):
        alpha.settle([enqueued(alpha, "job", T0)], [], 6)


def test_history_actions_and_pruning_stay_in_their_namespace(
    opened: Callable[[str | None], SqlStore],
) -> None:
    alpha, beta = opened("alpha"), opened("beta")
    for store in (alpha, beta):  # the next tick after the records: all prunable but the newest
        store.upsert(definition("job"), Source.API, T0 + 10 * MINUTE, 0)
        store.settle([enqueued(store, "job", T0 + i * MINUTE) for i in range(3)], [], 0)
    alpha.record_action(ActionEntry("alice", OperatorAction.PAUSE, "job", "a"), keep=5)
    assert {e.task_id.split(":")[0] for e in alpha.history("job", 10)} == {"alpha"}
    assert {e.task_id.split(":")[0] for e in beta.history("job", 10)} == {"beta"}
    assert [a.actor for a in alpha.actions("job", 5)] == ["alice"]
    assert beta.actions("job", 5) == [] and beta.actions(None, 5) == []
    assert alpha.history_extent("job") == (3, T0)
    assert alpha.prune_history(["job"], keep=1) == 2
    assert len(beta.history("job", 10)) == 3
    found = beta.find_enqueued(tick_task_id("job", T0, "beta"))
    assert found is not None and alpha.find_enqueued(tick_task_id("job", T0, "beta")) is None


def test_config_sync_archives_only_its_own_namespace(
    opened: Callable[[str | None], SqlStore],
) -> None:
    alpha, beta = opened("alpha"), opened("beta")
    sync_definitions(alpha, [definition("a1"), definition("shared")], T0, app="alpha-app")
    sync_definitions(beta, [definition("b1")], T0, app="beta-app")
    assert sorted(r.name for r in alpha.list_schedules()) == ["a1", "shared"]
    assert {r.state.value for r in alpha.list_schedules()} == {"active"}
    report = sync_definitions(beta, [], T0 + 1, app="beta-app")
    assert report.archived == ["b1"]
    assert {r.state.value for r in alpha.list_schedules()} == {"active"}


def test_two_apps_in_one_namespace_archive_none_of_each_others(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """SPEC §16: one WARNING naming both apps and the setting; the other's rows left alone (on
    every backend: the ``store`` fixture adds the in-memory one)."""
    shared = store
    sync_definitions(shared, [definition("from-a")], T0, app="app_a", namespace="shared")
    with caplog.at_level(logging.WARNING, logger="celery_durable_beat.sync"):
        report = sync_definitions(
            shared, [definition("from-b")], T0, app="app_b", namespace="shared"
        )
    assert report.created == ["from-b"] and report.archived == [] and report.other_apps == ["app_a"]
    row = shared.get("from-a")
    assert row is not None and row.state.value == "active"
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    text = warned[0].getMessage()
    assert "'app_a'" in text and "'app_b'" in text and "durable_beat_namespace" in text
    # Its own rows it still archives when they leave its config.
    assert sync_definitions(shared, [], T0 + 1, app="app_b").archived == ["from-b"]


def test_rows_synced_before_namespaces_are_adopted_by_the_first_app_to_sync_them(
    store: Store,
) -> None:
    default = store
    sync_definitions(default, [definition("old")], T0)  # no app: as releases before namespaces
    assert default.definition_digests(["old"])[0].app is None
    report = sync_definitions(default, [definition("old")], T0 + 1, app="proj")
    assert report.unchanged == ["old"] and report.updated == []
    digest = default.definition_digests(["old"])[0]
    assert digest.app == "proj"
    row = default.get("old")
    assert row is not None and row.version == 1 and row.next_tick_ms == T0 + MINUTE - T0 % MINUTE


def test_the_default_namespace_keeps_its_rows_ids_and_keys(
    opened: Callable[[str | None], SqlStore], store_url: str
) -> None:
    """Byte for byte as before namespaces: ids ``key@instant``, rows in namespace ``''``."""
    default, alpha = opened(None), opened("alpha")
    default.upsert(definition("Nightly Digest"), Source.API, T0, 0)
    alpha.upsert(definition("Nightly Digest"), Source.API, T0, 0)
    default.settle([enqueued(default, "Nightly Digest", T0)], [], 0)
    default.record_action(ActionEntry("bob", OperatorAction.PAUSE, "Nightly Digest", None), 5)
    assert tick_task_id("Nightly Digest", T0) == "nightly-digest-5f8873f1@2026-05-28T20:27:00Z"
    assert tick_task_id("Nightly Digest", T0, "alpha") == (
        "alpha:nightly-digest-5f8873f1@2026-05-28T20:27:00Z"
    )
    engine = create_engine(store_url)
    try:
        with engine.connect() as conn:
            names = conn.execute(select(schedules.c.namespace, schedules.c.name_key)).all()
            assert sorted(names) == [("", "nightly digest"), ("alpha", "nightly digest")]
            ids = conn.execute(select(audit.c.namespace, audit.c.task_id)).all()
            assert ids == [("", "nightly-digest-5f8873f1@2026-05-28T20:27:00Z")]
            assert conn.execute(select(actions.c.namespace)).scalars().all() == [""]
            assert sorted(conn.execute(select(fence.c.namespace)).scalars()) == ["", "alpha"]
    finally:
        engine.dispose()


def test_a_change_batch_for_another_namespaces_name_creates_its_own_row(
    opened: Callable[[str | None], SqlStore],
) -> None:
    """The fenced batch's insert conflicts only within its namespace."""
    alpha, beta = opened("alpha"), opened("beta")
    alpha.upsert(definition("job"), Source.API, T0, 0)
    results = beta.sync_config([ConfigChange("job", definition("job"), T0)], 0, T0)
    assert [r.status for r in results] == ["created"]
    beta_row, alpha_row = beta.get("job"), alpha.get("job")
    assert beta_row is not None and alpha_row is not None
    assert (beta_row.source, alpha_row.source) == (Source.CONFIG, Source.API)


def test_the_idle_round_is_one_probe_of_the_namespace_due_index(pg_url: str) -> None:
    """PostgreSQL: the idle round's read (the clock and the earliest due instant) and the due
    query walk ``(namespace, next_due_ms)``, whatever the other namespaces hold."""
    alpha, beta = SqlStore(pg_url, namespace="alpha"), SqlStore(pg_url, namespace="beta")
    try:
        alpha.ensure_schema()
        changes = [ConfigChange(f"job-{i}", definition(f"job-{i}"), T0 + i) for i in range(3000)]
        for start in range(0, len(changes), 500):
            beta.sync_config(changes[start : start + 500], 0, T0)
        alpha.sync_config(changes[:5], 0, T0)
        engine = create_engine(pg_url)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("ANALYZE durable_beat_schedules")
                for sql in (
                    "SELECT min(next_due_ms) FROM durable_beat_schedules WHERE namespace = 'alpha'",
                    "SELECT id FROM durable_beat_schedules WHERE namespace = 'alpha' "
                    "AND next_due_ms <= 9999999999999 ORDER BY next_due_ms LIMIT 500",
                ):
                    plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql))
                    assert "ix_durable_beat_schedules_namespace_next_due_ms" in plan, plan
                    assert "Seq Scan" not in plan, plan
        finally:
            engine.dispose()
        assert alpha.clock_and_earliest_due()[1] == T0
    finally:
        alpha.close()
        beta.close()


def test_a_name_both_apps_sync_into_one_namespace_is_warned_about_too(store: Store) -> None:
    """The two apps would re-plan one row in turn: said, not silent."""
    sync_definitions(store, [definition("both")], T0, app="app_a")
    report = sync_definitions(store, [definition("both", "b.task")], T0 + 1, app="app_b")
    assert report.other_apps == ["app_a"] and report.updated == ["both"]
    assert store.definition_digests(["both"])[0].app == "app_b"
