"""Schedule features: pause reasons, buffer_one, failure streaks, worker presence.

The columns hold a paused schedule's reason, the ``buffer_one`` tick and where a failure streak
starts; the table holds the workers that announce themselves.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Only nullable columns and a new table: upgrading a database in use rewrites no row, and every
existing schedule reads as it did (no reason, nothing buffered, failures counted from the start).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_SCHEDULES = "durable_beat_schedules"


def upgrade() -> None:
    with op.batch_alter_table(_SCHEDULES) as batch:
        batch.add_column(sa.Column("state_reason", sa.String(16), nullable=True))
        batch.add_column(sa.Column("buffered_tick_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("streak_from_ms", sa.BigInteger(), nullable=True))
    op.create_table(
        "durable_beat_workers",
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("queues", sa.JSON(), nullable=False),
        sa.Column("last_seen_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hostname", name=op.f("pk_durable_beat_workers")),
    )


def downgrade() -> None:
    op.drop_table("durable_beat_workers")
    with op.batch_alter_table(_SCHEDULES) as batch:
        batch.drop_column("streak_from_ms")
        batch.drop_column("buffered_tick_ms")
        batch.drop_column("state_reason")
