"""Creating and checking the store's schema with Alembic, driven from code.

Beat creates the schema on an empty database so the embedded SQLite default needs no extra step,
but it never upgrades on its own: an upgrade of a shared production database is an operator's
decision (``celery -A proj durable-beat migrate``). Both paths run under a migration lock (a
PostgreSQL advisory lock; SQLite's write lock) so two beats starting together cannot both try to
create the tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Column, MetaData, String, Table, func, inspect, select
from sqlalchemy.engine import Connection

from celery_durable_beat.exceptions import SchemaOutdated
from celery_durable_beat.store.sql.engine import insert_into
from celery_durable_beat.store.tables import DEFAULT_NAMESPACE, VERSION_TABLE, fence, metadata

MIGRATIONS = Path(__file__).parent.parent / "migrations"
MIGRATE_HINT = "run: celery -A proj durable-beat migrate"

_LOCK_KEY = 0x64_75_72_61_62_6C_65
"""PostgreSQL advisory lock id of schema changes ("durable" in ASCII)."""

_OUR_TABLES = frozenset(metadata.tables)

HEAD_REVISION = "0006"
"""The newest revision this version ships. A constant, so that a beat starting on a schema at
head reads one row and never imports Alembic (issue #16: 11 MB of RSS and a tenth of a second of
startup); ``tests/migration`` holds it equal to the migrations folder's head."""

_VERSION = Table(VERSION_TABLE, MetaData(), Column("version_num", String(32)))

if TYPE_CHECKING:
    from alembic.config import Config


def _config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    # ConfigParser interpolation would read a '%' in the install path as a format directive.
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision this version of the package ships."""
    return HEAD_REVISION


def scripted_head() -> str:
    """The head of the migrations folder, as Alembic reads it (tests compare it with
    ``HEAD_REVISION``)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None, "the migrations folder has no revision"
    return head


def current_revision(connection: Connection) -> str | None:
    """The revision recorded in the database (one row of Alembic's version table, read
    without Alembic), None when it has none."""
    return connection.execute(select(_VERSION.c.version_num)).scalar()


def lock(connection: Connection) -> None:
    """Serialise schema work; released when the caller's transaction ends."""
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_advisory_xact_lock(_LOCK_KEY)))


def ensure(connection: Connection, shown_url: str, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Create the schema on an empty database, accept it at head, refuse anything else."""
    lock(connection)
    tables = set(inspect(connection).get_table_names())
    if VERSION_TABLE not in tables and not tables & _OUR_TABLES:
        upgrade(connection, shown_url, namespace)
        return
    _require_head(connection, tables, shown_url)
    seed_fence(connection, namespace)


def upgrade(connection: Connection, shown_url: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """Upgrade to head inside the caller's transaction; return the head revision."""
    lock(connection)
    tables = set(inspect(connection).get_table_names())
    if VERSION_TABLE not in tables and tables & _OUR_TABLES:
        raise SchemaOutdated(_unversioned_message(shown_url))
    from alembic import command
    from alembic.util import CommandError

    try:
        command.upgrade(_config(connection), "head")
    except CommandError as exc:
        # Typically a revision this version does not know: a newer release migrated the database.
        raise SchemaOutdated(
            f"the durable beat schema at {shown_url} cannot be upgraded: {exc}; "
            "install the celery_durable_beat release that migrated it, or a newer one"
        ) from exc
    seed_fence(connection, namespace)
    return head_revision()


def seed_fence(connection: Connection, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Make sure the namespace's fence row exists (epoch 0 in a new namespace)."""
    connection.execute(
        insert_into(fence, connection.dialect.name)
        .values(namespace=namespace, epoch=0)
        .on_conflict_do_nothing(index_elements=[fence.c.namespace])
    )


def _require_head(connection: Connection, tables: set[str], shown_url: str) -> None:
    if VERSION_TABLE not in tables:
        raise SchemaOutdated(_unversioned_message(shown_url))
    current = current_revision(connection)
    head = head_revision()
    if current == head:
        return
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_config())
    known = current is None or current in {rev.revision for rev in script.walk_revisions()}
    if not known:
        raise SchemaOutdated(
            f"the durable beat schema at {shown_url} is at revision {current}, which this "
            f"version (needing {head}) does not know: a newer celery_durable_beat migrated it; "
            "upgrade celery_durable_beat"
        )
    raise SchemaOutdated(
        f"the durable beat schema at {shown_url} is at revision {current or 'base'}, "
        f"this version needs {head}; {MIGRATE_HINT}"
    )


def _unversioned_message(shown_url: str) -> str:
    return (
        f"the durable beat schema at {shown_url} has durable_beat_* tables but no "
        f"{VERSION_TABLE} table, so its revision is unknown; move those tables away, then "
        f"{MIGRATE_HINT}"
    )
