"""Control-plane queries of the SQL store: definitions, state changes, history, status.

Operator actions run a handful of times, never per tick, so they favour plain, obviously-correct
statements. Config sync and pruning are the exceptions that scale with the number of schedules:
each works in batches of a constant number of statements (store rules 7 and 8). Each function
takes the connection of a transaction its caller (``SqlStore``) opened; none of them commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    String,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql.elements import ColumnElement

from celery_durable_beat.exceptions import ScheduleNotFound
from celery_durable_beat.ids import name_key
from celery_durable_beat.model import (
    Definition,
    Outcome,
    ScheduleState,
    Source,
    StateReason,
    Trigger,
)
from celery_durable_beat.store.decode import decode_definition
from celery_durable_beat.store.rules import (
    NO_TICK,
    check_at_least,
    check_manual,
    column_values,
    decide_upsert,
    iter_chunks,
    state_values,
    storable_key,
)
from celery_durable_beat.store.sql.engine import HOST_CLOCK, PG_NOW, insert_into
from celery_durable_beat.store.sql.round import audit_values
from celery_durable_beat.store.tables import ENQUEUED, audit, fence, runs, schedules
from celery_durable_beat.store.values import (
    PRUNE_CHUNK,
    AuditEvent,
    ScheduleRecord,
    StoredEvent,
    StoredRow,
    UpsertDecision,
    UpsertResult,
)


def _records() -> Any:
    """Whole schedule rows with the definition as its stored text, decoded by ``to_record``:
    a definition the driver could not decode (nested too deeply, say) would fail the fetch of
    every row with it."""
    columns = [c for c in schedules.c if c.name != "definition"]
    return select(*columns, cast(schedules.c.definition, Text()).label("definition"))


def to_record(row: Row[Any]) -> ScheduleRecord:
    """A row of ``_records()``; an unreadable definition is kept as ``unreadable``."""
    definition, unreadable = decode_definition(row.name, row.definition)
    return ScheduleRecord(
        id=row.id,
        name=row.name,
        definition=definition,
        definition_hash=row.definition_hash,
        version=row.version,
        source=Source(row.source),
        state=ScheduleState(row.state),
        next_tick_ms=row.next_tick_ms,
        next_due_ms=row.next_due_ms,
        last_tick_ms=row.last_tick_ms,
        last_outcome=None if row.last_outcome is None else Outcome(row.last_outcome),
        failures=row.failures,
        created_at_ms=row.created_at_ms,
        updated_at_ms=row.updated_at_ms,
        state_reason=None if row.state_reason is None else StateReason(row.state_reason),
        buffered_tick_ms=row.buffered_tick_ms,
        unreadable=unreadable,
    )


def _named(ns: str, name: str) -> ColumnElement[bool]:
    """The row of ``name`` in the namespace: the unique ``(namespace, name_key)`` key."""
    return and_(schedules.c.namespace == ns, schedules.c.name_key == name_key(name))


def newest_epoch(ns: str) -> Any:
    """The namespace's newest epoch as a subquery (0 without a fence row), for records written
    outside the fence (manual runs, upserts) to carry, for reading only."""
    newest = select(fence.c.epoch).where(fence.c.namespace == ns).scalar_subquery()
    return func.coalesce(newest, 0)


def get(conn: Connection, ns: str, name: str) -> ScheduleRecord | None:
    row = conn.execute(_records().where(_named(ns, name))).first()
    return None if row is None else to_record(row)


def list_schedules(conn: Connection, ns: str) -> list[ScheduleRecord]:
    rows = conn.execute(
        _records().where(schedules.c.namespace == ns).order_by(schedules.c.name_key, schedules.c.id)
    )
    return [to_record(row) for row in rows]


def page_schedules(
    conn: Connection,
    ns: str,
    contains: str,
    state: ScheduleState | None,
    offset: int,
    limit: int,
) -> tuple[list[ScheduleRecord], int]:
    """See ``Store.page_schedules``: the page and the matching count, two bounded statements."""
    where = [schedules.c.namespace == ns]
    if contains:
        # The stored key, lower-cased by Python as every key is (``ids.name_key``): the
        # database's lower() differs for some letters ("İ"), and SQLite's folds ASCII only.
        where.append(schedules.c.name_key.contains(name_key(contains), autoescape=True))
    if state is not None:
        where.append(schedules.c.state == state.value)
    matched = conn.execute(select(func.count()).select_from(schedules).where(*where)).scalar()
    rows = conn.execute(
        _records()
        .where(*where)
        .order_by(schedules.c.name_key, schedules.c.id)
        .offset(offset)
        .limit(limit)
    )
    return [to_record(row) for row in rows], int(matched or 0)


def upsert(
    conn: Connection,
    ns: str,
    definition: Definition,
    source: Source,
    first_tick_ms: int | None,
    now_ms: int,
) -> UpsertResult:
    """See ``AdminStore.upsert``: ``rules.decide_upsert`` against the row locked for update.

    An insert that meets a row a concurrent upsert created first decides again against that row.
    """
    key = storable_key(definition.name)
    for _attempt in range(2):
        row = conn.execute(
            select(schedules)
            .where(schedules.c.namespace == ns, schedules.c.name_key == key)
            .with_for_update()
        ).first()
        found = None if row is None else to_stored_row(row)
        decision = decide_upsert(found, definition, source, first_tick_ms)
        result = UpsertResult(decision.name, decision.status, decision.version)
        if decision.values is None:
            return result
        if row is None:
            if _insert(conn, ns, definition, key, source, decision, now_ms):
                _record_created(conn, ns, decision, now_ms)
                return result
            continue  # a concurrent upsert created it first: decide against that row
        conn.execute(
            update(schedules)
            .where(schedules.c.id == row.id)
            .values(
                name=definition.name,
                definition=definition.to_json(),
                definition_hash=definition.definition_hash(),
                version=decision.version,
                updated_at_ms=now_ms,
                **column_values(decision.values),
            )
        )
        return result
    raise AssertionError(f"schedule {definition.name!r} neither inserted nor found")


def to_stored_row(row: Any) -> StoredRow:
    """A schedule row as a write decision reads it (``rules.decide_upsert``); any select that
    has the columns will do (config sync reads a narrower one)."""
    return StoredRow(
        id=row.id,
        name=row.name,
        source=Source(row.source),
        state=ScheduleState(row.state),
        definition_hash=row.definition_hash,
        version=row.version,
        next_tick_ms=row.next_tick_ms,
        next_due_ms=row.next_due_ms,
        enabled=bool((row.definition or {}).get("enabled", True)),
        state_reason=None if row.state_reason is None else StateReason(row.state_reason),
        buffered_tick_ms=row.buffered_tick_ms,
    )


def _record_created(conn: Connection, ns: str, decision: UpsertDecision, now_ms: int) -> None:
    """The record a creation leaves (an ``@at`` already past: ``skipped``, ``missed``), in the
    upsert's transaction, with the fence's newest epoch for reading only (an upsert is not
    fenced, like a manual run)."""
    if decision.dropped is None:
        return
    conn.execute(
        audit.insert().values(
            **audit_values(decision.dropped, ns), epoch=newest_epoch(ns), recorded_at_ms=now_ms
        )
    )


def _insert(
    conn: Connection,
    ns: str,
    definition: Definition,
    key: str,
    source: Source,
    decision: UpsertDecision,
    now_ms: int,
) -> bool:
    stmt = (
        insert_into(schedules, conn.dialect.name)
        .values(
            namespace=ns,
            name=definition.name,
            name_key=key,
            definition=definition.to_json(),
            definition_hash=definition.definition_hash(),
            version=decision.version,
            source=source.value,
            epoch=0,
            created_at_ms=now_ms,
            updated_at_ms=now_ms,
            **column_values(decision.values or {}),
        )
        .on_conflict_do_nothing(index_elements=[schedules.c.namespace, schedules.c.name_key])
        .returning(schedules.c.id)
    )
    return conn.execute(stmt).first() is not None


def set_state(
    conn: Connection,
    ns: str,
    name: str,
    state: ScheduleState,
    *,
    now_ms: int,
    next_tick_ms: int | None,
    next_due_ms: int | None,
    reason: StateReason | None = None,
) -> ScheduleRecord:
    """Write the state and exactly the given next tick/due (None clears them)."""
    result = conn.execute(
        update(schedules)
        .where(_named(ns, name))
        .values(
            **state_values(state, next_tick_ms, next_due_ms, reason),
            failures=0,
            updated_at_ms=now_ms,
        )
    )
    if result.rowcount == 0:
        raise ScheduleNotFound(name)
    record = get(conn, ns, name)
    assert record is not None
    return record


def delete_schedule(conn: Connection, ns: str, name: str) -> bool:
    result = conn.execute(delete(schedules).where(_named(ns, name)))
    return result.rowcount > 0


def record_manual(conn: Connection, ns: str, event: AuditEvent, *, check: bool = True) -> None:
    """One manual run's record, outside the fence by design (``AdminStore`` rule 10): no epoch
    condition; the row carries the fence's newest epoch, read in the same statement, for
    reading only. A second ``enqueued`` row for its task id is dropped (rule 3). ``check``
    False: the caller checked the trigger already (a backfill's records)."""
    if check:
        check_manual(event)
    postgres = conn.dialect.name == "postgresql"
    stmt = (
        insert_into(audit, conn.dialect.name)
        .values(
            **audit_values(event, ns),
            epoch=newest_epoch(ns),
            recorded_at_ms=PG_NOW if postgres else HOST_CLOCK.now_ms(),
        )
        .on_conflict_do_nothing(index_elements=[audit.c.task_id], index_where=ENQUEUED)
    )
    conn.execute(stmt)


def _events_query() -> Any:
    return select(*audit.c, runs.c.state.label("run_state")).select_from(
        audit.outerjoin(runs, runs.c.task_id == audit.c.task_id)
    )


def to_event(row: Row[Any]) -> StoredEvent:
    return StoredEvent(
        id=row.id,
        schedule=row.schedule,
        tick_ms=row.tick_ms,
        task_id=row.task_id,
        trigger=Trigger(row.trigger),
        outcome=Outcome(row.outcome),
        reason=row.reason,
        lag_ms=row.lag_ms,
        version=row.version,
        epoch=row.epoch,
        recorded_at_ms=row.recorded_at_ms,
        detail=row.detail,
        run_state=row.run_state,
    )


def history(
    conn: Connection, ns: str, name: str, limit: int, before_id: int | None
) -> list[StoredEvent]:
    check_at_least("history limit", limit, 1)
    query = _events_query().where(audit.c.namespace == ns, audit.c.schedule_key == name_key(name))
    if before_id is not None:
        query = query.where(audit.c.id < before_id)
    rows = conn.execute(query.order_by(audit.c.id.desc()).limit(limit))
    return [to_event(row) for row in rows]


def find_enqueued(conn: Connection, ns: str, task_id: str) -> StoredEvent | None:
    query = _events_query().where(audit.c.task_id == task_id, ENQUEUED, audit.c.namespace == ns)
    row = conn.execute(query).first()
    return None if row is None else to_event(row)


def prune_history(conn: Connection, ns: str, names: Sequence[str], keep: int) -> int:
    """One DELETE per ``PRUNE_CHUNK`` schedules, below each one's ``keep``-th newest event.

    What survives is ``rules.prunable``'s choice (the memory store calls it; the contract tests
    hold this query to it): the newest automatic ``enqueued`` record, every record at or after
    the schedule's next tick and every record the redelivery sweep still watches (rule 11),
    whatever ``keep`` says. A window over each schedule's records (the ``(schedule_key, id)``
    index) ranks them, so one statement settles hundreds of schedules.
    """
    check_at_least("keep", keep, 0)
    removed = 0
    postgres = conn.dialect.name == "postgresql"
    for chunk in iter_chunks(sorted({name_key(name) for name in names}), PRUNE_CHUNK):
        surplus = _prunable(ns, list(chunk), keep, postgres)
        result = conn.execute(delete(audit).where(audit.c.id.in_(surplus)))
        removed += result.rowcount
    return removed


def _prunable(ns: str, keys: list[str], keep: int, postgres: bool) -> Any:
    """The ids of the chunk's surplus records, in one SELECT (see ``prune_history``). The keys
    go to PostgreSQL as one array (hundreds of parameters cost psycopg more to place in the
    statement than the statement costs the server), to SQLite as an IN list within its limit."""
    own = audit.c.schedule_key
    chosen = (
        own == any_(bindparam("prune_keys", keys, type_=ARRAY(String())))
        if postgres
        else own.in_(keys)
    )
    auto_enqueued = and_(ENQUEUED, audit.c.trigger == Trigger.AUTO.value)
    ranked = (
        select(
            audit.c.id,
            audit.c.tick_ms,
            audit.c.recheck_ms,
            own.label("key"),
            func.row_number().over(partition_by=own, order_by=audit.c.id.desc()).label("rank"),
            func.max(case((auto_enqueued, audit.c.id), else_=None))
            .over(partition_by=own)
            .label("newest_enqueued"),
        )
        .where(audit.c.namespace == ns, chosen)
        .subquery("ranked")
    )
    next_tick = func.coalesce(schedules.c.next_tick_ms, NO_TICK)
    return (
        select(ranked.c.id)
        .select_from(
            ranked.outerjoin(
                schedules,
                and_(schedules.c.namespace == ns, schedules.c.name_key == ranked.c.key),
            )
        )
        .where(
            ranked.c.rank > keep,
            ranked.c.id != func.coalesce(ranked.c.newest_enqueued, -1),
            ranked.c.recheck_ms.is_(None),  # still watched for redelivery (rule 11)
            ranked.c.tick_ms < next_tick,
        )
    )


def counts_by_state(conn: Connection, ns: str) -> dict[str, int]:
    counts = {state.value: 0 for state in ScheduleState}
    rows = conn.execute(
        select(schedules.c.state, func.count())
        .where(schedules.c.namespace == ns)
        .group_by(schedules.c.state)
    ).all()
    counts.update((state, int(count)) for state, count in rows)
    return counts


def due_backlog(conn: Connection, ns: str, now_ms: int) -> int:
    query = (
        select(func.count())
        .select_from(schedules)
        .where(schedules.c.namespace == ns, schedules.c.next_due_ms <= now_ms)
    )
    return int(conn.execute(query).scalar_one())
