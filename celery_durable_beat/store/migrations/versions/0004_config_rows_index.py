"""Config sync reads only the rows it owns (store rule 7): a partial index on the config rows.

Config sync used to read four columns of every stored schedule to find its differences, so a
beat's first round over a million API-created schedules read a million rows although its config
named ten. Now it reads the config rows not archived, through this index, and the rows the config
names, by their unique key.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

One index, built from the existing rows; nothing else changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_SCHEDULES = "durable_beat_schedules"
_INDEX = "ix_durable_beat_schedules_config_name_key"
_CONFIG_ROWS = sa.text("source = 'config'")


def upgrade() -> None:
    op.create_index(
        op.f(_INDEX),
        _SCHEDULES,
        ["name_key"],
        postgresql_where=_CONFIG_ROWS,
        sqlite_where=_CONFIG_ROWS,
    )


def downgrade() -> None:
    op.drop_index(op.f(_INDEX), table_name=_SCHEDULES)
