"""Alembic environment: runs on the connection ``SqlStore`` opened, inside its transaction.

There is no ``alembic.ini`` and no URL here on purpose: the store decides how to connect (driver,
SQLite pragmas, the migration lock) and hands the connection over in ``config.attributes``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from celery_durable_beat.store.tables import VERSION_TABLE, metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError(
        "the durable beat migrations run through SqlStore.migrate(), which passes a connection; "
        "run: celery -A proj durable-beat migrate"
    )
_run(connection)
