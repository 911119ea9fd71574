"""Redelivery of lost ticks (SPEC §6): what the leader watches, on each tick's first record.

The audit table gains three nullable columns on a tick's first ``enqueued`` record: when the
leader looks at it next (``recheck_ms``, with a partial index holding only the watched ticks),
when it was last published (``sent_ms``) and how many times it was sent again
(``redeliveries``). The unique index on the ``enqueued`` records' task ids now leaves out the
records of redeliveries (trigger ``redeliver``), which carry the tick's task id again.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Only nullable columns and index changes: upgrading rewrites no row; every existing record reads
as it did (not watched: redelivery covers ticks published after it is turned on).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_AUDIT = "durable_beat_audit"
_UNIQUE = "uq_durable_beat_audit_enqueued_task_id"
_OLD_ENQUEUED = sa.text("outcome = 'enqueued'")
_ENQUEUED = sa.text("outcome = 'enqueued' AND trigger != 'redeliver'")
_RECHECK = sa.text("recheck_ms IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table(_AUDIT) as batch:
        batch.add_column(sa.Column("recheck_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("sent_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("redeliveries", sa.Integer(), nullable=True))
    op.create_index(
        op.f("ix_durable_beat_audit_recheck_ms"),
        _AUDIT,
        ["recheck_ms"],
        postgresql_where=_RECHECK,
        sqlite_where=_RECHECK,
    )
    _unique_enqueued(_ENQUEUED)


def downgrade() -> None:
    audit = sa.table(_AUDIT, sa.column("trigger"))
    op.execute(audit.delete().where(audit.c.trigger == "redeliver"))
    _unique_enqueued(_OLD_ENQUEUED)
    op.drop_index(op.f("ix_durable_beat_audit_recheck_ms"), table_name=_AUDIT)
    with op.batch_alter_table(_AUDIT) as batch:
        batch.drop_column("redeliveries")
        batch.drop_column("sent_ms")
        batch.drop_column("recheck_ms")


def _unique_enqueued(where: sa.TextClause) -> None:
    op.drop_index(op.f(_UNIQUE), table_name=_AUDIT)
    op.create_index(
        op.f(_UNIQUE), _AUDIT, ["task_id"], unique=True, postgresql_where=where, sqlite_where=where
    )
