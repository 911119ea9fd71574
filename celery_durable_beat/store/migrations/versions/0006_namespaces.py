"""Namespaces (SPEC §16): several apps on one store, each with its own schedules and leader.

Every table that holds a namespace's data gets a ``namespace`` column, NOT NULL with the default
``''`` (the default namespace): every existing row lands in the default namespace, which reads
exactly the rows it always had. What was unique or indexed by a schedule's key is now by
``(namespace, key)``, namespace first, so each namespace's idle round stays one probe of one index:

- schedules: unique ``(namespace, name_key)``; the due index ``(namespace, next_due_ms)``; the
  config rows' partial index ``(namespace, name_key)``; and ``config_app``, the ``main`` name of
  the app whose config sync wrote a config row (NULL for rows synced before this revision: the
  first sync of the namespace adopts them);
- audit: ``(namespace, schedule_key, id)`` and the watched ticks' ``(namespace, recheck_ms)``; the
  unique index of first ``enqueued`` records stays on ``task_id`` alone (ids carry their
  namespace);
- fence: one row per namespace, keyed by it (the single row ``id = 1`` becomes the default
  namespace's row, its epoch and lease holder kept);
- runs ``(namespace, schedule_key, tick_ms)``, workers keyed by ``(namespace, hostname)``, actions
  ``(namespace, schedule_key, id)``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04

Upgrading rewrites no value but the fence's key; downgrading keeps only the default namespace's
rows (the others have nowhere to go).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_NS = "namespace"
_CONFIG_ROWS = sa.text("source = 'config'")
_RECHECK = sa.text("recheck_ms IS NOT NULL")
_KEYED = ("durable_beat_audit", "durable_beat_runs", "durable_beat_actions")
"""Tables whose rows only gain the column (their indexes are replaced below)."""


def _namespace_column(*, primary_key: bool = False) -> sa.Column[str]:
    return sa.Column(_NS, sa.String(40), nullable=False, server_default="", primary_key=primary_key)


def upgrade() -> None:
    _upgrade_schedules()
    _upgrade_audit()
    _upgrade_fence()
    for table, old, new, columns in (
        ("durable_beat_runs", "schedule_key_tick_ms", _NS + "_schedule_key_tick_ms",
         [_NS, "schedule_key", "tick_ms"]),
        ("durable_beat_actions", "schedule_key_id", _NS + "_schedule_key_id",
         [_NS, "schedule_key", "id"]),
    ):  # fmt: skip
        op.drop_index(op.f(f"ix_{table}_{old}"), table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.add_column(_namespace_column())
        op.create_index(op.f(f"ix_{table}_{new}"), table, columns)
    with op.batch_alter_table("durable_beat_workers", recreate="always") as batch:
        batch.add_column(_namespace_column())
        batch.drop_constraint(op.f("pk_durable_beat_workers"), type_="primary")
        batch.create_primary_key(op.f("pk_durable_beat_workers"), [_NS, "hostname"])


def _upgrade_schedules() -> None:
    table = "durable_beat_schedules"
    op.drop_index(op.f("ix_durable_beat_schedules_next_due_ms"), table_name=table)
    op.drop_index(op.f("ix_durable_beat_schedules_config_name_key"), table_name=table)
    with op.batch_alter_table(table) as batch:
        batch.add_column(_namespace_column())
        batch.add_column(sa.Column("config_app", sa.String(255), nullable=True))
        batch.drop_constraint(op.f("uq_durable_beat_schedules_name_key"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_durable_beat_schedules_namespace_name_key"), [_NS, "name_key"]
        )
    op.create_index(
        op.f("ix_durable_beat_schedules_namespace_next_due_ms"), table, [_NS, "next_due_ms"]
    )
    op.create_index(
        op.f("ix_durable_beat_schedules_config_namespace_name_key"),
        table,
        [_NS, "name_key"],
        postgresql_where=_CONFIG_ROWS,
        sqlite_where=_CONFIG_ROWS,
    )


def _upgrade_audit() -> None:
    table = "durable_beat_audit"
    op.drop_index(op.f("ix_durable_beat_audit_schedule_key_id"), table_name=table)
    op.drop_index(op.f("ix_durable_beat_audit_recheck_ms"), table_name=table)
    with op.batch_alter_table(table) as batch:
        batch.add_column(_namespace_column())
    op.create_index(
        op.f("ix_durable_beat_audit_namespace_schedule_key_id"), table, [_NS, "schedule_key", "id"]
    )
    op.create_index(
        op.f("ix_durable_beat_audit_namespace_recheck_ms"),
        table,
        [_NS, "recheck_ms"],
        postgresql_where=_RECHECK,
        sqlite_where=_RECHECK,
    )


def _upgrade_fence() -> None:
    """The single row (``id = 1``) becomes the default namespace's, keyed by the namespace."""
    with op.batch_alter_table("durable_beat_fence", recreate="always") as batch:
        batch.add_column(_namespace_column())
        batch.drop_constraint(op.f("ck_durable_beat_fence_single_row"), type_="check")
        batch.drop_constraint(op.f("pk_durable_beat_fence"), type_="primary")
        batch.drop_column("id")
        batch.create_primary_key(op.f("pk_durable_beat_fence"), [_NS])
    with op.batch_alter_table("durable_beat_fence") as batch:
        batch.alter_column(_NS, server_default=None)


def downgrade() -> None:
    """Back to one namespace: the default's rows stay, the others' are deleted."""
    for table in ("durable_beat_schedules", *_KEYED, "durable_beat_workers", "durable_beat_fence"):
        op.execute(sa.text(f"DELETE FROM {table} WHERE namespace <> ''"))  # noqa: S608 constant
    with op.batch_alter_table("durable_beat_fence", recreate="always") as batch:
        batch.add_column(sa.Column("id", sa.Integer(), nullable=False, server_default="1"))
        batch.drop_constraint(op.f("pk_durable_beat_fence"), type_="primary")
        batch.drop_column(_NS)
        batch.create_primary_key(op.f("pk_durable_beat_fence"), ["id"])
        batch.create_check_constraint(op.f("ck_durable_beat_fence_single_row"), "id = 1")
    with op.batch_alter_table("durable_beat_fence") as batch:
        batch.alter_column("id", server_default=None)
    with op.batch_alter_table("durable_beat_workers", recreate="always") as batch:
        batch.drop_constraint(op.f("pk_durable_beat_workers"), type_="primary")
        batch.drop_column(_NS)
        batch.create_primary_key(op.f("pk_durable_beat_workers"), ["hostname"])
    for table, old, new, columns in (
        ("durable_beat_runs", "schedule_key_tick_ms", _NS + "_schedule_key_tick_ms",
         ["schedule_key", "tick_ms"]),
        ("durable_beat_actions", "schedule_key_id", _NS + "_schedule_key_id",
         ["schedule_key", "id"]),
        ("durable_beat_audit", "schedule_key_id", _NS + "_schedule_key_id",
         ["schedule_key", "id"]),
    ):  # fmt: skip
        op.drop_index(op.f(f"ix_{table}_{new}"), table_name=table)
        op.create_index(op.f(f"ix_{table}_{old}"), table, columns)
    _downgrade_rest()


def _downgrade_rest() -> None:
    audit, schedules = "durable_beat_audit", "durable_beat_schedules"
    op.drop_index(op.f("ix_durable_beat_audit_namespace_recheck_ms"), table_name=audit)
    op.create_index(
        op.f("ix_durable_beat_audit_recheck_ms"),
        audit,
        ["recheck_ms"],
        postgresql_where=_RECHECK,
        sqlite_where=_RECHECK,
    )
    op.drop_index(op.f("ix_durable_beat_schedules_namespace_next_due_ms"), table_name=schedules)
    op.drop_index(op.f("ix_durable_beat_schedules_config_namespace_name_key"), table_name=schedules)
    with op.batch_alter_table(schedules) as batch:
        batch.drop_constraint(op.f("uq_durable_beat_schedules_namespace_name_key"), type_="unique")
        batch.create_unique_constraint(op.f("uq_durable_beat_schedules_name_key"), ["name_key"])
        batch.drop_column("config_app")
    op.create_index(op.f("ix_durable_beat_schedules_next_due_ms"), schedules, ["next_due_ms"])
    op.create_index(
        op.f("ix_durable_beat_schedules_config_name_key"),
        schedules,
        ["name_key"],
        postgresql_where=_CONFIG_ROWS,
        sqlite_where=_CONFIG_ROWS,
    )
    for table in (schedules, *_KEYED):
        with op.batch_alter_table(table) as batch:
            batch.drop_column(_NS)
