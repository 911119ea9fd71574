"""The SQL store's action log and backfill statements (SPEC §15; store rules 10 and 12).

Operator actions are rare, so each is plain statements in its caller's transaction: the row,
then one DELETE of that schedule's rows past ``keep`` (so the log of a schedule stays bounded
whether or not a beat ever prunes, and after the schedule is gone). Every value is a bound
parameter: reasons are user text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, delete, func, select
from sqlalchemy.engine import Connection, Row

from celery_durable_beat.ids import name_key
from celery_durable_beat.model import OperatorAction
from celery_durable_beat.store.rules import check_action, check_at_least, check_backfill
from celery_durable_beat.store.sql.admin import record_manual
from celery_durable_beat.store.sql.engine import HOST_CLOCK, PG_NOW
from celery_durable_beat.store.tables import actions, audit
from celery_durable_beat.store.values import ActionEntry, AuditEvent, StoredAction


def record_action(conn: Connection, ns: str, entry: ActionEntry, keep: int) -> None:
    """One action row stamped with the store's clock, then the schedule's surplus removed."""
    check_action(entry)
    check_at_least("keep", keep, 1)
    key = name_key(entry.schedule)
    postgres = conn.dialect.name == "postgresql"
    conn.execute(
        actions.insert().values(
            namespace=ns,
            at_ms=PG_NOW if postgres else HOST_CLOCK.now_ms(),
            actor=entry.actor,
            action=entry.action.value,
            schedule=entry.schedule,
            schedule_key=key,
            reason=entry.reason,
        )
    )
    conn.execute(delete(actions).where(actions.c.id.in_(_surplus(ns, key, keep))))


def _surplus(ns: str, key: str, keep: int) -> Any:
    """The ids of ``key``'s rows older than its ``keep`` newest (``rules.prunable_actions``)."""
    own = and_(actions.c.namespace == ns, actions.c.schedule_key == key)
    newest = select(actions.c.id).where(own).order_by(actions.c.id.desc()).limit(keep).subquery()
    floor = select(func.min(newest.c.id)).scalar_subquery()
    return select(actions.c.id).where(own, actions.c.id < floor)


def list_actions(
    conn: Connection, ns: str, name: str | None, limit: int, before_id: int | None
) -> list[StoredAction]:
    """Newest first, one schedule's (``name``) or everyone's in the namespace, ids below
    ``before_id``."""
    check_at_least("actions limit", limit, 1)
    query = select(actions).where(actions.c.namespace == ns)
    if name is not None:
        query = query.where(actions.c.schedule_key == name_key(name))
    if before_id is not None:
        query = query.where(actions.c.id < before_id)
    rows = conn.execute(query.order_by(actions.c.id.desc()).limit(limit))
    return [_to_action(row) for row in rows]


def _to_action(row: Row[Any]) -> StoredAction:
    return StoredAction(
        id=row.id,
        at_ms=row.at_ms,
        actor=row.actor,
        action=OperatorAction(row.action),
        schedule=row.schedule,
        reason=row.reason,
    )


def record_backfill(conn: Connection, ns: str, events: Sequence[AuditEvent]) -> None:
    """A backfill's records, unfenced like a manual run's (rule 10); an ``enqueued`` record
    whose task id has one already (an automatic tick that got there first) is dropped."""
    check_backfill(events)
    for event in events:
        record_manual(conn, ns, event, check=False)


def history_extent(conn: Connection, ns: str, name: str) -> tuple[int, int | None]:
    """How many audit records a schedule keeps, and the oldest tick among them."""
    row = conn.execute(
        select(func.count(), func.min(audit.c.tick_ms)).where(
            audit.c.namespace == ns, audit.c.schedule_key == name_key(name)
        )
    ).one()
    return int(row[0]), None if row[1] is None else int(row[1])
