"""Store rule 11 on SQL: the watched ticks whose recheck is due, and the sweep's fenced write.

The read is one query on ``ix_durable_beat_audit_recheck_ms``, a partial index holding only the
watched records (``recheck_ms IS NOT NULL``): an idle check is one probe of a tiny index, however
long the history. Each candidate comes with its schedule as it is now (an outer join on the
unique ``name_key``), so the sweep can rebuild the tick's message without a read per tick.

The write is fenced as the round's (``round.py``'s module docstring): the redeliveries' records
go through ``round.record`` (in-statement fence on PostgreSQL, the write lock on SQLite); each
recheck update carries the fence in its WHERE clause, and the fence is read once after them, in
the same transaction, to tell a refusal (``StaleEpoch``: everything rolls back).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Text, and_, bindparam, cast, select, update
from sqlalchemy.engine import Connection

from celery_durable_beat.store.sql import round as sql_round
from celery_durable_beat.store.tables import RECHECK, audit, schedules
from celery_durable_beat.store.values import AuditEvent, Recheck, RedeliveryCandidate


def candidates(
    conn: Connection, ns: str, now_ms: int, limit: int, definitions: sql_round.DefinitionCache
) -> list[RedeliveryCandidate]:
    """At most ``limit`` of the namespace's watched records with ``recheck_ms <= now_ms``,
    earliest first (the ``(namespace, recheck_ms)`` partial index)."""
    query = (
        select(
            audit.c.id,
            audit.c.schedule,
            audit.c.tick_ms,
            audit.c.task_id,
            audit.c.version,
            audit.c.recorded_at_ms,
            audit.c.sent_ms,
            audit.c.redeliveries,
            audit.c.recheck_ms,
            schedules.c.name,
            cast(schedules.c.definition, Text()).label("definition"),
            schedules.c.version.label("schedule_version"),
        )
        .select_from(
            audit.outerjoin(
                schedules,
                and_(
                    schedules.c.namespace == audit.c.namespace,
                    schedules.c.name_key == audit.c.schedule_key,
                ),
            )
        )
        .where(RECHECK, audit.c.namespace == ns, audit.c.recheck_ms <= now_ms)
        .order_by(audit.c.recheck_ms)
        .limit(limit)
    )
    found: list[RedeliveryCandidate] = []
    for row in conn.execute(query).all():
        definition = None
        if row.definition is not None:
            try:
                definition = definitions.parse(row.name, row.definition)
            except (KeyError, TypeError, ValueError):
                definition = None  # unreadable: the round quarantines it; nothing to rebuild
        found.append(
            RedeliveryCandidate(
                record_id=row.id,
                schedule=row.schedule,
                tick_ms=row.tick_ms,
                task_id=row.task_id,
                version=row.version,
                recorded_at_ms=row.recorded_at_ms,
                sent_ms=row.recorded_at_ms if row.sent_ms is None else row.sent_ms,
                redeliveries=row.redeliveries or 0,
                recheck_ms=row.recheck_ms,
                definition=definition,
                schedule_version=None if definition is None else row.schedule_version,
            )
        )
    return found


def settle(
    conn: Connection,
    ns: str,
    events: Sequence[AuditEvent],
    rechecks: Sequence[Recheck],
    epoch: int,
) -> None:
    """The redeliveries' records, then the rechecks, fenced (module docstring)."""
    if conn.dialect.name != "postgresql":
        sql_round.sqlite_fence(conn, epoch, ns)
    sql_round.record(conn, events, epoch, ns)
    if not rechecks:
        return
    stmt = (
        update(audit)
        .where(audit.c.id == bindparam("b_id"), sql_round.fenced(bindparam("b_epoch"), ns))
        .values(
            recheck_ms=bindparam("b_recheck"),
            sent_ms=bindparam("b_sent"),
            redeliveries=bindparam("b_count"),
        )
    )
    rows = [
        {
            "b_id": item.record_id,
            "b_recheck": item.recheck_ms,
            "b_sent": item.sent_ms,
            "b_count": item.redeliveries,
            "b_epoch": epoch,
        }
        for item in rechecks
    ]
    conn.execute(stmt, rows)
    sql_round.refuse_if_stale(conn, epoch, ns)
