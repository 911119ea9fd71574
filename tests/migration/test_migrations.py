"""The migration history creates exactly the declared schema, and outdated schemas are refused."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, create_engine, delete, inspect, select, update
from sqlalchemy.engine import Engine

from celery_durable_beat.exceptions import SchemaOutdated
from celery_durable_beat.model import OperatorAction
from celery_durable_beat.store.base import ActionEntry
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.sql import schema as sql_schema
from celery_durable_beat.store.tables import (
    NAMING_CONVENTION,
    VERSION_TABLE,
    audit,
    fence,
    metadata,
)

pytestmark = pytest.mark.migration


@pytest.fixture
def store(store_url: str) -> Iterator[SqlStore]:
    sql_store = SqlStore(store_url)
    yield sql_store
    sql_store.close()


@pytest.fixture
def engine(store: SqlStore) -> Iterator[Engine]:
    raw = create_engine(store.url)
    yield raw
    raw.dispose()


def schema_diff(engine: Engine, target: MetaData) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
        )
        return list(compare_metadata(context, target))


def set_version(engine: Engine, revision: str | None) -> None:
    version = MetaData()
    version.reflect(engine, only=[VERSION_TABLE])
    table = version.tables[VERSION_TABLE]
    with engine.begin() as conn:
        if revision is None:
            conn.execute(delete(table))
        else:
            conn.execute(update(table).values(version_num=revision))


def test_upgrade_head_creates_exactly_the_declared_schema(store: SqlStore, engine: Engine) -> None:
    assert store.migrate() == sql_schema.head_revision()
    assert schema_diff(engine, metadata) == []
    with engine.connect() as conn:
        assert conn.execute(select(fence.c.namespace, fence.c.epoch)).all() == [("", 0)]


def test_the_comparison_would_see_a_difference(store: SqlStore, engine: Engine) -> None:
    store.migrate()
    altered = MetaData(naming_convention=NAMING_CONVENTION)
    for table in metadata.tables.values():
        table.to_metadata(altered)
    altered.tables["durable_beat_runs"].append_column(Column("attempts", Integer()))
    diff = schema_diff(engine, altered)
    assert [entry[0] for entry in diff] == ["add_column"]


def test_migrate_is_idempotent_and_downgrade_is_clean(store: SqlStore, engine: Engine) -> None:
    head = store.migrate()
    assert store.migrate() == head
    with engine.begin() as conn:
        command.downgrade(sql_schema._config(conn), "base")
    assert set(inspect(engine).get_table_names()) == {VERSION_TABLE}
    assert store.migrate() == head
    assert schema_diff(engine, metadata) == []


def test_ensure_schema_creates_on_an_empty_database(store: SqlStore, engine: Engine) -> None:
    store.ensure_schema()
    store.ensure_schema()
    assert schema_diff(engine, metadata) == []


def test_ensure_schema_refuses_an_older_revision(store: SqlStore, engine: Engine) -> None:
    store.migrate()
    with engine.begin() as conn:
        command.downgrade(sql_schema._config(conn), "base")
    with pytest.raises(SchemaOutdated) as caught:
        store.ensure_schema()
    message = str(caught.value)
    assert "is at revision base" in message
    assert f"needs {sql_schema.head_revision()}" in message
    assert message.endswith("run: celery -A proj durable-beat migrate")
    store.migrate()
    store.ensure_schema()


def test_ensure_schema_refuses_a_revision_stamped_back(store: SqlStore, engine: Engine) -> None:
    store.migrate()
    set_version(engine, None)
    with pytest.raises(SchemaOutdated, match="durable-beat migrate"):
        store.ensure_schema()


def test_ensure_schema_refuses_tables_without_a_version(store: SqlStore, engine: Engine) -> None:
    store.migrate()
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {VERSION_TABLE}")
    with pytest.raises(SchemaOutdated, match="no durable_beat_alembic_version table"):
        store.ensure_schema()
    with pytest.raises(SchemaOutdated):
        store.migrate()


def test_ensure_schema_refuses_a_revision_from_a_newer_release(
    store: SqlStore, engine: Engine
) -> None:
    store.migrate()
    set_version(engine, "9999")
    with pytest.raises(SchemaOutdated, match="upgrade celery_durable_beat"):
        store.ensure_schema()
    with pytest.raises(SchemaOutdated, match="9999"):
        store.migrate()


def test_schema_messages_hide_the_password(pg_url: str) -> None:
    with_password = pg_url.replace("postgres@", "postgres:hunter2@", 1)
    store = SqlStore(with_password)  # trust auth accepts any password
    raw = create_engine(store.url)
    try:
        store.migrate()
        set_version(raw, None)
        with pytest.raises(SchemaOutdated) as caught:
            store.ensure_schema()
        assert "hunter2" not in str(caught.value)
        assert "***" in str(caught.value)
    finally:
        raw.dispose()
        store.close()


def test_beats_starting_together_create_the_schema_once(pg_url: str) -> None:
    stores = [SqlStore(pg_url) for _ in range(4)]
    errors: list[BaseException] = []

    def start(store: SqlStore) -> None:
        try:
            store.ensure_schema()
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for store in stores:
        store.close()
    assert errors == []


def test_the_head_constant_is_the_migrations_head() -> None:
    assert sql_schema.scripted_head() == sql_schema.HEAD_REVISION == sql_schema.head_revision()


def test_a_schema_at_head_is_checked_without_importing_alembic(store: SqlStore) -> None:
    """Issue #16: Alembic (11 MB, 0.1 s) is imported only to create or upgrade a schema."""
    import subprocess
    import sys

    store.migrate()
    probe = (
        "import sys\n"
        "from celery_durable_beat.store.sql import SqlStore\n"
        f"s = SqlStore({store.url!r}); s.ensure_schema(); s.close()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_0005_adds_the_action_log_to_a_0004_store_keeping_its_history(
    store: SqlStore, engine: Engine
) -> None:
    """An installed 0004 store with history upgrades in place; a downgrade drops only the log."""
    store.migrate()
    with engine.begin() as conn:
        command.downgrade(sql_schema._config(conn), "0004")
    assert "durable_beat_actions" not in inspect(engine).get_table_names()
    row = {
        "schedule": "job",
        "schedule_key": "job",
        "tick_ms": 60_000,
        "task_id": "job@1970-01-01T00:01:00Z",
        "trigger": "auto",
        "outcome": "enqueued",
        "version": 1,
        "epoch": 1,
        "recorded_at_ms": 60_000,
        "detail": {},
    }
    with engine.begin() as conn:
        conn.execute(audit.insert().values(**row))
    with pytest.raises(SchemaOutdated, match="needs 0006"):
        store.ensure_schema()
    assert store.migrate() == "0006"
    assert schema_diff(engine, metadata) == []
    assert [e.task_id for e in store.history("job", 10)] == [row["task_id"]]
    store.record_action(ActionEntry("alice", OperatorAction.PAUSE, "job", "why"), keep=5)
    assert [(a.actor, a.reason) for a in store.actions("job", 5)] == [("alice", "why")]
    with engine.begin() as conn:
        command.downgrade(sql_schema._config(conn), "0004")
        kept = conn.execute(select(audit.c.task_id)).scalars().all()
    assert "durable_beat_actions" not in inspect(engine).get_table_names()
    assert kept == [row["task_id"]]
