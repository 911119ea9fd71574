"""The initial schema: schedules, audit, fence, runs.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Written out in full rather than imported from ``tables.py``: a revision is frozen history, and the
migration test compares its result with the declared schema.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_ENQUEUED = sa.text("outcome = 'enqueued'")


def upgrade() -> None:
    op.create_table(
        "durable_beat_schedules",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("name_key", sa.String(200), nullable=False),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("definition_hash", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("next_tick_ms", sa.BigInteger(), nullable=True),
        sa.Column("next_due_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_tick_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_outcome", sa.String(16), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_durable_beat_schedules")),
        sa.UniqueConstraint("name_key", name=op.f("uq_durable_beat_schedules_name_key")),
        sa.CheckConstraint(
            "source IN ('config', 'api')", name=op.f("ck_durable_beat_schedules_source")
        ),
        sa.CheckConstraint(
            "state IN ('active', 'paused', 'archived', 'quarantined')",
            name=op.f("ck_durable_beat_schedules_state"),
        ),
        sa.CheckConstraint(
            "state = 'active' OR next_due_ms IS NULL",
            name=op.f("ck_durable_beat_schedules_due_only_when_active"),
        ),
    )
    op.create_index(
        op.f("ix_durable_beat_schedules_next_due_ms"), "durable_beat_schedules", ["next_due_ms"]
    )

    op.create_table(
        "durable_beat_audit",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("schedule", sa.String(200), nullable=False),
        sa.Column("schedule_key", sa.String(200), nullable=False),
        sa.Column("tick_ms", sa.BigInteger(), nullable=False),
        sa.Column("task_id", sa.String(300), nullable=True),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(64), nullable=True),
        sa.Column("lag_ms", sa.BigInteger(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_durable_beat_audit")),
    )
    op.create_index(
        op.f("ix_durable_beat_audit_schedule_key_id"), "durable_beat_audit", ["schedule_key", "id"]
    )
    op.create_index(
        op.f("uq_durable_beat_audit_enqueued_task_id"),
        "durable_beat_audit",
        ["task_id"],
        unique=True,
        postgresql_where=_ENQUEUED,
        sqlite_where=_ENQUEUED,
    )

    op.create_table(
        "durable_beat_fence",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(255), nullable=True),
        sa.Column("token", sa.String(255), nullable=True),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_durable_beat_fence")),
        sa.CheckConstraint("id = 1", name=op.f("ck_durable_beat_fence_single_row")),
    )
    fence = sa.table("durable_beat_fence", sa.column("id"), sa.column("epoch"))
    op.bulk_insert(fence, [{"id": 1, "epoch": 0}])

    op.create_table(
        "durable_beat_runs",
        sa.Column("task_id", sa.String(300), nullable=False),
        sa.Column("schedule_key", sa.String(200), nullable=False),
        sa.Column("tick_ms", sa.BigInteger(), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=True),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_durable_beat_runs")),
    )
    op.create_index(
        op.f("ix_durable_beat_runs_schedule_key_tick_ms"),
        "durable_beat_runs",
        ["schedule_key", "tick_ms"],
    )


def downgrade() -> None:
    op.drop_table("durable_beat_runs")
    op.drop_table("durable_beat_fence")
    op.drop_table("durable_beat_audit")
    op.drop_table("durable_beat_schedules")
