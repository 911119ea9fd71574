"""The round's hot path on SQL: the due query, audit inserts, compare-and-set advances.

Each is batched so a round of thousands of due schedules costs a few statements, not thousands:
PostgreSQL gets audit rows and advances as one JSON parameter each (a single C ``json.dumps``,
where adapting an array per column element by element cost more than the statements), one
``INSERT … SELECT … FROM json_to_recordset(…)`` and one ``UPDATE … FROM json_to_recordset(…)``
whose RETURNING says which rows were written; SQLite, which has
the write lock for the whole transaction, writes audit rows in one executemany and decides the
compare-and-set from one read before writing the winners in one executemany.

Fencing (SPEC §7) is decided where it cannot be overtaken by an epoch bump:

- on PostgreSQL, inside the writing statements themselves: each carries
  ``WHERE (SELECT epoch FROM fence) <= :epoch``, read in the statement's own snapshot, so a
  leader that stalled after its last check and woke up after a new leader registered its epoch
  writes nothing. When a statement wrote fewer rows than it was given, the fence is read again
  to tell a refusal (``StaleEpoch``, and the transaction rolls back) from replays and
  compare-and-set misses. No lock is taken on the fence row: the lease renews it all the time,
  and a stalled old leader holding a lock on it would stall the new leader, which is exactly
  the failure fencing exists to survive.
- on SQLite, by a read at the start of the write transaction: it began ``IMMEDIATE``, holding
  the only write lock, so no epoch bump can commit between that read and the writes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    JSON,
    BigInteger,
    Integer,
    String,
    Text,
    all_,
    bindparam,
    cast,
    column,
    func,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from celery_durable_beat import faults
from celery_durable_beat.ids import name_key
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action, Definition, ScheduleState
from celery_durable_beat.store.rules import iter_chunks, refuse_stale, stored_value
from celery_durable_beat.store.sql import schema as sql_schema
from celery_durable_beat.store.sql.engine import HOST_CLOCK, IN_CHUNK, PG_NOW, insert_into
from celery_durable_beat.store.tables import ENQUEUED, audit, fence, schedules
from celery_durable_beat.store.values import Advance, AuditEvent, DueSchedule

log = logging.getLogger("celery_durable_beat.store")


def enqueued_among(conn: Connection, task_ids: Sequence[str]) -> set[str]:
    """Which task ids have an ``enqueued`` record, through the partial unique index.

    PostgreSQL gets the ids as one array (a semi-join the planner can hash, whatever the size);
    SQLite gets IN lists within its variable limit.
    """
    if conn.dialect.name == "postgresql":
        wanted = (
            func.unnest(bindparam("ids", type_=ARRAY(String())))
            .table_valued("task_id")
            .render_derived(name="wanted")
        )
        query = select(audit.c.task_id).where(
            ENQUEUED, audit.c.task_id.in_(select(wanted.c.task_id))
        )
        return set(conn.execute(query, {"ids": list(task_ids)}).scalars())
    found: set[str] = set()
    for chunk in iter_chunks(list(dict.fromkeys(task_ids)), IN_CHUNK):
        query = select(audit.c.task_id).where(ENQUEUED, audit.c.task_id.in_(chunk))
        found.update(conn.execute(query).scalars())
    return found


DEFINITION_CACHE_SIZE = 1024
"""Most parsed definitions a store keeps (``DefinitionCache``): memory stays bounded whatever
the number of schedules."""


class DefinitionCache:
    """Stored definitions already parsed, by their JSON text, so a schedule due round after
    round (or many sharing one definition) is not parsed again each time.

    Keyed by the exact stored text, which holds everything but the name: a hit is the same
    definition renamed (``Definition.renamed``), equal to parsing the text again. At most
    ``size`` texts are kept; the oldest goes first. A definition that cannot be read is never
    kept: it raises as it would without the cache.
    """

    def __init__(self, size: int = DEFINITION_CACHE_SIZE) -> None:
        self._size = size
        self._parsed: dict[str, Definition] = {}
        self._lock = threading.Lock()

    def parse(self, name: str, text: str) -> Definition:
        parsed = self._parsed.get(text)
        if parsed is None:
            parsed = Definition.from_json(name, json.loads(text))
            with self._lock:
                while self._parsed and len(self._parsed) >= self._size:
                    del self._parsed[next(iter(self._parsed))]
                self._parsed[text] = parsed
        return parsed if parsed.name == name else parsed.renamed(name)


def due(
    conn: Connection,
    ns: str,
    now_ms: int,
    limit: int,
    definitions: DefinitionCache | None = None,
    excluding: Collection[int] = (),
) -> list[DueSchedule]:
    """The namespace's due rows, earliest first (the ``(namespace, next_due_ms)`` index), but
    those in ``excluding`` (a burst's rows being settled,
    store rule 12); not locked (store rule 2: fencing and compare-and-set settle what two beats
    reading the same rows may do). Definitions are read as their stored text and parsed
    through ``definitions`` (a fresh cache when None)."""
    parse = (definitions or DefinitionCache()).parse
    query = (
        select(
            schedules.c.id,
            schedules.c.name,
            cast(schedules.c.definition, Text()).label("definition"),
            schedules.c.version,
            schedules.c.next_tick_ms,
            schedules.c.last_tick_ms,
            schedules.c.failures,
            schedules.c.buffered_tick_ms,
            schedules.c.streak_from_ms,
        )
        .where(schedules.c.namespace == ns, schedules.c.next_due_ms <= now_ms)
        .order_by(schedules.c.next_due_ms)
    )
    skipped = frozenset(excluding)
    if skipped and conn.dialect.name == "postgresql":
        # One array parameter: the index scan steps over the rows in flight on the server.
        query = query.where(schedules.c.id != all_(bindparam("skip", type_=ARRAY(BigInteger()))))
        rows = conn.execute(query.limit(limit), {"skip": sorted(skipped)}).all()
    else:  # SQLite's variable limit: read as many more rows and leave them out here
        rows = conn.execute(query.limit(limit + len(skipped))).all()
        rows = [row for row in rows if row[0] not in skipped][:limit]
    found: list[DueSchedule] = []
    for row_id, name, text, version, next_tick, last_tick, failures, held, streak in rows:
        try:
            definition = parse(name, text)
        except (KeyError, TypeError, ValueError) as exc:
            _quarantine_unreadable(conn, row_id, name, exc)
            continue
        found.append(
            DueSchedule(
                id=row_id,
                name=name,
                definition=definition,
                version=version,
                next_tick_ms=next_tick,
                last_tick_ms=last_tick,
                failures=failures,
                buffered_tick_ms=held,
                streak_from_ms=streak,
                namespace=ns or None,
            )
        )
    return found


def _quarantine_unreadable(conn: Connection, row_id: int, name: str, exc: Exception) -> None:
    """A stored definition this version cannot read (a zone gone from tzdata, a downgrade) must
    not stop every other schedule: it is quarantined until an upsert or resume mends it."""
    log.error(
        "schedule %s quarantined: its stored definition cannot be read (%s)",
        name,
        cause(exc),
        extra=log_extra(Action.QUARANTINED, schedule=name),
    )
    conn.execute(
        update(schedules)
        .where(schedules.c.id == row_id)
        .values(state=ScheduleState.QUARANTINED.value, next_due_ms=None)
    )


def newest_epoch(conn: Connection, ns: str) -> int:
    """The newest epoch the namespace has seen (0 without a fence row: a hand-made schema)."""
    newest = conn.execute(select(fence.c.epoch).where(fence.c.namespace == ns)).scalar()
    return int(newest or 0)


def fenced(epoch: Any, ns: str) -> ColumnElement[bool]:
    """The fence as a condition of the writing statement: no newer epoch has been registered
    in the namespace (each namespace has its own leader and epoch)."""
    newest = select(fence.c.epoch).where(fence.c.namespace == ns).scalar_subquery()
    condition: ColumnElement[bool] = func.coalesce(newest, 0) <= epoch
    return condition


def refuse_if_stale(conn: Connection, epoch: int, ns: str) -> None:
    """Raise StaleEpoch when a newer epoch than ``epoch`` is registered (the fence only rises)."""
    refuse_stale(epoch, newest_epoch(conn, ns))


def sqlite_fence(conn: Connection, epoch: int, ns: str) -> int:
    """SQLite: the fence read under the write lock (module docstring); the store time."""
    refuse_if_stale(conn, epoch, ns)
    faults.point("fenced_write")
    return HOST_CLOCK.now_ms()


def record(conn: Connection, events: Sequence[AuditEvent], epoch: int, ns: str) -> None:
    """Insert the namespace's audit rows, fenced (module docstring); a second ``enqueued`` row
    for a task id is dropped by the partial unique index (rule 3)."""
    if not events:
        return
    if conn.dialect.name == "postgresql":
        _record_pg(conn, events, epoch, ns)
        return
    now = sqlite_fence(conn, epoch, ns)
    rows = [{**audit_values(event, ns), "epoch": epoch, "recorded_at_ms": now} for event in events]
    stmt = insert_into(audit, "sqlite").on_conflict_do_nothing(
        index_elements=[audit.c.task_id], index_where=ENQUEUED
    )
    conn.execute(stmt, rows)


_AUDIT_TYPES: dict[str, Any] = {
    "namespace": String(),
    "schedule": String(),
    "schedule_key": String(),
    "tick_ms": BigInteger(),
    "task_id": String(),
    "trigger": String(),
    "outcome": String(),
    "reason": String(),
    "lag_ms": BigInteger(),
    "version": Integer(),
    "detail": JSON(),
    "recheck_ms": BigInteger(),
}
"""The audit columns a round writes, as the PostgreSQL batch declares them (``_given``)."""


def audit_values(event: AuditEvent, ns: str) -> dict[str, Any]:
    return {
        "namespace": ns,
        "schedule": event.schedule,
        "schedule_key": name_key(event.schedule),
        "tick_ms": event.tick_ms,
        "task_id": event.task_id,
        "trigger": stored_value(event.trigger),
        "outcome": stored_value(event.outcome),
        "reason": stored_value(event.reason),
        "lag_ms": event.lag_ms,
        "version": event.version,
        "detail": dict(event.detail),
        "recheck_ms": event.recheck_ms,
    }


def _given(prefix: str, types: dict[str, Any]) -> Any:
    """``json_to_recordset(CAST(:<prefix>_rows AS JSON)) AS given(<name> <type>, …)``: a batch of
    rows as one JSON parameter. One ``json.dumps`` of the batch (C) replaces adapting one array
    per column element by element, the largest cost of a round's writes before."""
    rows = cast(bindparam(f"{prefix}_rows", type_=String()), JSON())
    return (
        func.json_to_recordset(rows)
        .table_valued(*(column(name, type_) for name, type_ in types.items()))
        .render_derived(name="given", with_types=True)
    )


def _record_pg(conn: Connection, events: Sequence[AuditEvent], epoch: int, ns: str) -> None:
    """``INSERT … SELECT … FROM json_to_recordset(…) WHERE <fenced> ON CONFLICT DO NOTHING
    RETURNING id``."""
    given = _given("r", _AUDIT_TYPES)
    values: dict[str, Any] = {name: given.c[name] for name in _AUDIT_TYPES}
    values["epoch"] = bindparam("r_epoch", type_=BigInteger())
    values["recorded_at_ms"] = PG_NOW
    chosen = select(*values.values()).where(fenced(bindparam("r_epoch"), ns))
    stmt = (
        insert_into(audit, "postgresql")
        .from_select(list(values), chosen)
        .on_conflict_do_nothing(index_elements=[audit.c.task_id], index_where=ENQUEUED)
        .returning(audit.c.id)
    )
    faults.point("fenced_write")
    for chunk in iter_chunks(events, 5000):
        rows = json.dumps([audit_values(event, ns) for event in chunk])
        written = len(conn.execute(stmt, {"r_rows": rows, "r_epoch": epoch}).all())
        if written < len(chunk):  # replays, or refused by the fence: the fence says which
            refuse_if_stale(conn, epoch, ns)


def _moved(item: Advance) -> dict[str, Any]:
    """The columns an advance moves (``_MOVED``), as stored."""
    return {
        "next_tick_ms": item.next_tick_ms,
        "next_due_ms": item.next_due_ms,
        "last_tick_ms": item.last_tick_ms,
        "last_outcome": stored_value(item.last_outcome),
        "failures": item.failures,
        "state": item.state.value,
        "state_reason": stored_value(item.state_reason),
        "buffered_tick_ms": item.buffered_tick_ms,
    }


def _advance_values(item: Advance, epoch: int, now: int) -> dict[str, Any]:
    return {**_moved(item), "epoch": epoch, "updated_at_ms": now}


_MOVED = (
    "next_tick_ms",
    "next_due_ms",
    "last_tick_ms",
    "failures",
    "last_outcome",
    "state",
    "state_reason",
    "buffered_tick_ms",
)
_ADVANCE_TYPES: dict[str, Any] = {
    "id": BigInteger(),
    "expected": BigInteger(),
    **{
        name: String() if name in ("last_outcome", "state", "state_reason") else BigInteger()
        for name in _MOVED
    },
}


def _advance_from_rows(ns: str) -> Any:
    """``UPDATE schedules … FROM json_to_recordset(:a_rows) AS given(…) … RETURNING id``."""
    given = _given("a", _ADVANCE_TYPES)
    return (
        update(schedules)
        .where(
            schedules.c.id == given.c.id,
            # NULL equals NULL here: a ``buffer_one`` tick may outlive the schedule's end_at.
            schedules.c.next_tick_ms.is_not_distinct_from(given.c.expected),
            # A schedule paused or archived since the round read it stays where it is.
            schedules.c.state == ScheduleState.ACTIVE.value,
            fenced(bindparam("a_epoch"), ns),
        )
        .values(
            {
                **{name: given.c[name] for name in _MOVED},
                "epoch": bindparam("a_epoch"),
                "updated_at_ms": PG_NOW,
            }
        )
        .returning(schedules.c.id)
    )


def advance(conn: Connection, advances: Sequence[Advance], epoch: int, ns: str) -> set[int]:
    """Compare-and-set advances, fenced by the namespace's epoch (module docstring); the ids
    that moved (row ids are the table's own: the namespace is only the fence's)."""
    if conn.dialect.name == "postgresql":
        return _advance_pg(conn, advances, epoch, ns)
    return _advance_sqlite(conn, advances, epoch, sqlite_fence(conn, epoch, ns))


def _advance_pg(conn: Connection, advances: Sequence[Advance], epoch: int, ns: str) -> set[int]:
    """One statement per chunk, whatever the number of schedules: rows in, moved ids out."""
    stmt = _advance_from_rows(ns)
    applied: set[int] = set()
    faults.point("fenced_write")
    for chunk in iter_chunks(advances, 5000):
        rows = [
            {"id": item.schedule_id, "expected": item.expected_next_tick_ms, **_moved(item)}
            for item in chunk
        ]
        params = {"a_rows": json.dumps(rows), "a_epoch": epoch}
        moved = set(conn.execute(stmt, params).scalars())
        if len(moved) < len(chunk):  # compare-and-set misses, or the fence: the fence says which
            refuse_if_stale(conn, epoch, ns)
        applied.update(moved)
    return applied


def _advance_sqlite(
    conn: Connection, advances: Sequence[Advance], epoch: int, now: int
) -> set[int]:
    """Decide the compare-and-set in Python, then one executemany.

    Exact because the transaction began IMMEDIATE: no other writer can move a row between the
    read and the update. (SQLite reports no per-row counts for executemany.)
    """
    expected = {item.schedule_id: item.expected_next_tick_ms for item in advances}
    applied: set[int] = set()
    for chunk in iter_chunks(list(expected), IN_CHUNK):
        rows = conn.execute(
            select(schedules.c.id, schedules.c.next_tick_ms).where(
                schedules.c.id.in_(chunk), schedules.c.state == ScheduleState.ACTIVE.value
            )
        )
        applied.update(row.id for row in rows if row.next_tick_ms == expected[row.id])
    moving = [
        {"b_id": item.schedule_id, **_advance_values(item, epoch, now)}
        for item in advances
        if item.schedule_id in applied
    ]
    if moving:
        conn.execute(update(schedules).where(schedules.c.id == bindparam("b_id")), moving)
    return applied


def register_epoch(conn: Connection, epoch: int, ns: str) -> None:
    def raise_to() -> Any:
        return (
            update(fence).where(fence.c.namespace == ns, fence.c.epoch < epoch).values(epoch=epoch)
        )

    if conn.execute(raise_to()).rowcount == 0:
        # A namespace's first epoch, or a missing row (hand-made schema): fencing must hold.
        sql_schema.seed_fence(conn, ns)
        conn.execute(raise_to())
