"""Reading a peer's tables by SQL: SQLAlchemy Core and reflection, never the peer's own code.

Reflection (not declared copies of the peers' models) lets one reader serve every version of a
peer: a column an older release lacks (django-celery-beat's ``headers``, ``expire_seconds``,
the crontab ``timezone``) is simply absent from the row. The tables are looked for in the
connection's default schema first, then in every other schema (sqlalchemy-celery-beat puts
them wherever ``beat_schema`` says).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from celery_durable_beat.exceptions import ImportSourceError, InvalidArgument
from celery_durable_beat.urls import redact_url


@dataclass(frozen=True)
class PeerTables:
    """The peer's tables found in one schema (``None``: the default one), by short name."""

    schema: str | None
    tables: dict[str, sa.Table]

    def get(self, name: str) -> sa.Table | None:
        return self.tables.get(name)

    def rows(self, conn: Connection, name: str) -> list[dict[str, Any]]:
        """Every row of a table (empty when the peer's version has no such table)."""
        table = self.tables.get(name)
        if table is None:
            return []
        return [dict(row._mapping) for row in conn.execute(sa.select(table))]

    def by_id(self, conn: Connection, name: str) -> dict[Any, dict[str, Any]]:
        return {row["id"]: row for row in self.rows(conn, name)}


@contextmanager
def connect(url: str, kind: str) -> Iterator[Connection]:
    """A read-only use of the source database; one clear error when it cannot be opened."""
    shown = redact_url(url)
    try:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    except (ArgumentError, NoSuchModuleError, ImportError, ValueError) as exc:
        raise InvalidArgument(
            f"{shown} is not a SQLAlchemy URL this install can open ({exc}); give the {kind} "
            "database, e.g. postgresql+psycopg://user@host/db or sqlite:////path/db.sqlite3"
        ) from None
    try:
        try:
            conn = engine.connect()
        except SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise ImportSourceError(
                f"the {kind} database at {shown} does not answer: {reason}"
            ) from None
        with conn:
            yield conn
    finally:
        engine.dispose()


def find_tables(
    conn: Connection, kind: str, url: str, main: str, names: Sequence[str]
) -> PeerTables:
    """Reflect ``names`` from the schema that holds ``main``; none anywhere is an error."""
    inspector = sa.inspect(conn)
    found, schema = _schema_of(inspector, main)
    if not found:
        raise ImportSourceError(
            f"{redact_url(url)} holds no {kind} tables (no {main}); is it the right database, "
            "and did the peer's migrations run?"
        )
    present = set(inspector.get_table_names(schema=schema))
    wanted = [n for n in names if n in present]
    metadata = sa.MetaData()
    metadata.reflect(bind=conn, schema=schema, only=wanted)
    prefix = f"{schema}." if schema else ""
    return PeerTables(schema, {n: metadata.tables[prefix + n] for n in wanted})


def _schema_of(inspector: Any, table: str) -> tuple[bool, str | None]:
    """Whether ``table`` exists, and in which schema (None: the default one)."""
    if inspector.has_table(table):
        return True, None
    default = inspector.default_schema_name
    for schema in inspector.get_schema_names():
        if schema != default and inspector.has_table(table, schema=schema):
            return True, str(schema)
    return False, None


Rows = dict[Any, dict[str, Any]]


def read_task_tables(
    url: str, kind: str, tasks: str, intervals: str, crontabs: str, clocked: str
) -> tuple[list[dict[str, Any]], Rows, Rows, Rows]:
    """The two Django-shaped peers' one read: periodic tasks in name order, and their interval,
    crontab and clocked rows by id (a peer's version without clocked schedules: none)."""
    with connect(url, kind) as conn:
        tables = find_tables(conn, kind, url, tasks, (tasks, intervals, crontabs, clocked))
        by_interval = tables.by_id(conn, intervals)
        by_crontab = tables.by_id(conn, crontabs)
        by_clocked = tables.by_id(conn, clocked)
        found = sorted(tables.rows(conn, tasks), key=lambda row: str(row["name"]))
    return found, by_interval, by_crontab, by_clocked
