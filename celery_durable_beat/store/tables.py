"""The one schema of the SQL store, as SQLAlchemy Core tables.

Migrations are written by hand against this module and a test proves the migrated database
equals it (``tests/migration``), so change both together. Every table carries the
``durable_beat_`` prefix because the store often shares a database with the application.

Times are UTC epoch milliseconds in BIGINT columns rather than timestamps: the dispatch layer
computes in milliseconds, tick identities are millisecond instants, and integers compare the
same way on PostgreSQL and SQLite.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    and_,
    literal_column,
)

from celery_durable_beat.store.values import ACTOR_LENGTH, NAME_LENGTH, REASON_LENGTH

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

VERSION_TABLE = "durable_beat_alembic_version"
"""Alembic's bookkeeping table; prefixed so it never collides with the application's own."""

NAMESPACE_LENGTH = 40
"""Longest ``durable_beat_namespace`` (SPEC §2)."""
DEFAULT_NAMESPACE = ""
"""The default namespace's stored value (setting unset): what every row made before namespaces
holds after the upgrade, so the default namespace reads exactly the rows it always had."""

TASK_ID_LENGTH = 300
"""Room for ``<key>@manual-<32 hex>`` with the longest key a 200-character name can produce."""

# SQLite only gives a column the rowid autoincrement behaviour when it is exactly INTEGER.
_ID = BigInteger().with_variant(Integer(), "sqlite")

schedules = Table(
    "durable_beat_schedules",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("namespace", String(NAMESPACE_LENGTH), nullable=False, server_default=""),
    Column("name", String(NAME_LENGTH), nullable=False),
    Column("name_key", String(NAME_LENGTH), nullable=False),
    Column("definition", JSON(), nullable=False),
    Column("definition_hash", String(64), nullable=False),
    Column("version", Integer(), nullable=False),
    Column("source", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("next_tick_ms", BigInteger(), nullable=True),
    # NULL unless active (checked below), so the due index holds only schedules that can fire.
    Column("next_due_ms", BigInteger(), nullable=True),
    Column("last_tick_ms", BigInteger(), nullable=True),
    Column("last_outcome", String(16), nullable=True),
    Column("failures", Integer(), nullable=False),
    Column("epoch", BigInteger(), nullable=False),
    Column("created_at_ms", BigInteger(), nullable=False),
    Column("updated_at_ms", BigInteger(), nullable=False),
    # Why a paused schedule is paused (operator, disabled, failures); NULL otherwise.
    Column("state_reason", String(16), nullable=True),
    # ``buffer_one``: the one tick waiting for the previous run to end (SPEC §6).
    Column("buffered_tick_ms", BigInteger(), nullable=True),
    # ``pause_on_failure`` counts failed runs of ticks at or after this instant only: set when
    # the schedule is planned from now (created, changed, resumed), so resuming clears the count.
    Column("streak_from_ms", BigInteger(), nullable=True),
    # The ``main`` name of the app whose config sync wrote a config row (NULL for API rows and
    # for rows synced before namespaces): sync archives only its own app's rows (SPEC §16).
    Column("config_app", String(255), nullable=True),
    UniqueConstraint("namespace", "name_key"),
    CheckConstraint("source IN ('config', 'api')", name="source"),
    CheckConstraint("state IN ('active', 'paused', 'archived', 'quarantined')", name="state"),
    CheckConstraint("state = 'active' OR next_due_ms IS NULL", name="due_only_when_active"),
)
Index("ix_durable_beat_schedules_namespace_next_due_ms", schedules.c.namespace,
      schedules.c.next_due_ms)  # fmt: skip

CONFIG_ROWS = schedules.c.source == literal_column("'config'")
"""Config sync's rows (store rule 7), as SQL text so a prepared plan still matches the index:
a store of a million API schedules lets sync read only the few the config owns."""
Index("ix_durable_beat_schedules_config_namespace_name_key", schedules.c.namespace,
      schedules.c.name_key, postgresql_where=CONFIG_ROWS, sqlite_where=CONFIG_ROWS)  # fmt: skip

audit = Table(
    "durable_beat_audit",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("namespace", String(NAMESPACE_LENGTH), nullable=False, server_default=""),
    Column("schedule", String(NAME_LENGTH), nullable=False),
    Column("schedule_key", String(NAME_LENGTH), nullable=False),
    Column("tick_ms", BigInteger(), nullable=False),
    Column("task_id", String(TASK_ID_LENGTH), nullable=True),
    Column("trigger", String(16), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("reason", String(64), nullable=True),
    Column("lag_ms", BigInteger(), nullable=True),
    Column("version", Integer(), nullable=False),
    Column("epoch", BigInteger(), nullable=False),
    Column("recorded_at_ms", BigInteger(), nullable=False),
    Column("detail", JSON(), nullable=False),
    # Redelivery (SPEC §6), on a tick's first ``enqueued`` record only: when the leader looks
    # at it next (NULL: never again — claimed, given up, or redelivery off), when it was last
    # published (NULL: when it was recorded) and how many times it was published again.
    Column("recheck_ms", BigInteger(), nullable=True),
    Column("sent_ms", BigInteger(), nullable=True),
    Column("redeliveries", Integer(), nullable=True),
)
Index("ix_durable_beat_audit_namespace_schedule_key_id", audit.c.namespace, audit.c.schedule_key,
      audit.c.id)  # fmt: skip

RECHECK = audit.c.recheck_ms.is_not(None)
"""The redelivery index's predicate: it holds only the ticks still watched, so an idle check is
one probe of a tiny index whatever the size of the history."""
Index("ix_durable_beat_audit_namespace_recheck_ms", audit.c.namespace, audit.c.recheck_ms,
      postgresql_where=RECHECK, sqlite_where=RECHECK)  # fmt: skip

ENQUEUED = and_(
    audit.c.outcome == literal_column("'enqueued'"),
    audit.c.trigger != literal_column("'redeliver'"),
)
"""The partial unique index's predicate, as SQL text rather than bound parameters: queries and
ON CONFLICT targets repeat it verbatim so PostgreSQL can match them to the index even in a
generic (prepared) plan. A redelivery's own ``enqueued`` record (trigger ``redeliver``) carries
the tick's task id again and is left out: one tick, one first record, any number of re-sends.
Task ids carry their namespace (``ids``), so the index needs no namespace column to keep two
namespaces' ticks apart."""

Index(
    "uq_durable_beat_audit_enqueued_task_id",
    audit.c.task_id,
    unique=True,
    postgresql_where=ENQUEUED,
    sqlite_where=ENQUEUED,
)

fence = Table(
    "durable_beat_fence",
    metadata,
    Column("namespace", String(NAMESPACE_LENGTH), primary_key=True),
    Column("epoch", BigInteger(), nullable=False),
    Column("holder", String(255), nullable=True),
    Column("token", String(255), nullable=True),
    Column("expires_at_ms", BigInteger(), nullable=True),
)
"""One row per namespace: the newest epoch seen there and, for the store lease, who holds it;
each namespace has its own leader and its own fencing epoch (SPEC §16)."""

runs = Table(
    "durable_beat_runs",
    metadata,
    Column("task_id", String(TASK_ID_LENGTH), primary_key=True),
    Column("namespace", String(NAMESPACE_LENGTH), nullable=False, server_default=""),
    Column("schedule_key", String(NAME_LENGTH), nullable=False),
    Column("tick_ms", BigInteger(), nullable=False),
    Column("trigger", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("hostname", String(255), nullable=True),
    Column("updated_at_ms", BigInteger(), nullable=False),
    Column("expires_at_ms", BigInteger(), nullable=True),
)
Index("ix_durable_beat_runs_namespace_schedule_key_tick_ms", runs.c.namespace, runs.c.schedule_key,
      runs.c.tick_ms)  # fmt: skip

workers = Table(
    "durable_beat_workers",
    metadata,
    Column("namespace", String(NAMESPACE_LENGTH), primary_key=True, server_default=""),
    Column("hostname", String(255), primary_key=True),
    Column("queues", JSON(), nullable=False),
    Column("last_seen_ms", BigInteger(), nullable=False),
)
"""Workers that ran ``install(app)``, each announcing the queues it consumes on its heartbeat
(``require_worker``, ``status``)."""

actions = Table(
    "durable_beat_actions",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("namespace", String(NAMESPACE_LENGTH), nullable=False, server_default=""),
    Column("at_ms", BigInteger(), nullable=False),
    Column("actor", String(ACTOR_LENGTH), nullable=False),
    Column("action", String(16), nullable=False),
    Column("schedule", String(NAME_LENGTH), nullable=False),
    Column("schedule_key", String(NAME_LENGTH), nullable=False),
    Column("reason", String(REASON_LENGTH), nullable=True),
)
"""Who did what (SPEC §15): one row per operator action, keyed by schedule name like the audit
(it outlives the schedule), kept ``durable_beat_history_keep`` rows per schedule."""
Index("ix_durable_beat_actions_namespace_schedule_key_id", actions.c.namespace,
      actions.c.schedule_key, actions.c.id)  # fmt: skip
