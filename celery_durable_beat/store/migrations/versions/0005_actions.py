"""Who did what (SPEC §15): the operator action log.

A new table, ``durable_beat_actions``: one row per pause, resume, archive, delete, upsert,
trigger, backfill and import, with the actor, the schedule (by name, so it outlives the
schedule) and the operator's reason. An index on ``(schedule_key, id)`` serves a schedule's log
newest first and its pruning.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

Only a new table: upgrading rewrites no row; downgrading drops the log.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_ACTIONS = "durable_beat_actions"
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        _ACTIONS,
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("schedule", sa.String(200), nullable=False),
        sa.Column("schedule_key", sa.String(200), nullable=False),
        sa.Column("reason", sa.String(500), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_durable_beat_actions")),
    )
    op.create_index(
        op.f("ix_durable_beat_actions_schedule_key_id"), _ACTIONS, ["schedule_key", "id"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_durable_beat_actions_schedule_key_id"), table_name=_ACTIONS)
    op.drop_table(_ACTIONS)
