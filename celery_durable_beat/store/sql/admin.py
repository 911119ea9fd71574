"""Control-plane queries of the SQL store: definitions, state changes, history, status.

Operator actions run a handful of times, never per tick, so they favour plain, obviously-correct
statements. Config sync and pruning are the exceptions that scale with the number of schedules:
each works in batches of a constant number of statements (store rules 7 and 8). Each function
takes the connection of a transaction its caller (``SqlStore``) opened; none of them commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, case, delete, func, select, update
from sqlalchemy.engine import Connection, Row

from celery_durable_beat.exceptions import InvalidArgument, ScheduleNotFound
from celery_durable_beat.ids import name_key
from celery_durable_beat.model import (
    Definition,
    Outcome,
    ScheduleState,
    Source,
    StateReason,
    Trigger,
)
from celery_durable_beat.store.base import (
    PRUNE_CHUNK,
    ScheduleRecord,
    StoredEvent,
    UpsertResult,
    iter_chunks,
    plan_values,
    state_values,
)
from celery_durable_beat.store.sql.engine import IN_CHUNK, insert_into
from celery_durable_beat.store.tables import ENQUEUED, NAME_LENGTH, audit, runs, schedules


def _storable_key(name: str) -> str:
    """The key of a name about to be stored; the columns hold at most NAME_LENGTH characters."""
    key = name_key(name)
    if not name or len(name) > NAME_LENGTH or len(key) > NAME_LENGTH:
        raise InvalidArgument(f"schedule name {name!r} must have 1 to {NAME_LENGTH} characters")
    return key


def to_record(row: Row[Any]) -> ScheduleRecord:
    return ScheduleRecord(
        id=row.id,
        name=row.name,
        definition=Definition.from_json(row.name, row.definition),
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
    )


def get(conn: Connection, name: str) -> ScheduleRecord | None:
    row = conn.execute(select(schedules).where(schedules.c.name_key == name_key(name))).first()
    return None if row is None else to_record(row)


def list_schedules(conn: Connection) -> list[ScheduleRecord]:
    rows = conn.execute(select(schedules).order_by(schedules.c.name_key, schedules.c.id))
    return [to_record(row) for row in rows]


def page_schedules(
    conn: Connection, contains: str, state: ScheduleState | None, offset: int, limit: int
) -> tuple[list[ScheduleRecord], int]:
    """See ``Store.page_schedules``: the page and the matching count, two bounded statements."""
    where = []
    if contains:
        where.append(func.lower(schedules.c.name).contains(contains.lower(), autoescape=True))
    if state is not None:
        where.append(schedules.c.state == state.value)
    matched = conn.execute(select(func.count()).select_from(schedules).where(*where)).scalar()
    rows = conn.execute(
        select(schedules)
        .where(*where)
        .order_by(schedules.c.name_key, schedules.c.id)
        .offset(offset)
        .limit(limit)
    )
    return [to_record(row) for row in rows], int(matched or 0)


def upsert(
    conn: Connection, definition: Definition, source: Source, first_tick_ms: int | None, now_ms: int
) -> UpsertResult:
    """See ``Store.upsert``. Three more rules the contract leaves open:

    - config sync never touches an API-created schedule (SPEC §3): a ``config`` upsert of a name
      owned by ``api`` is ``unchanged`` and writes nothing; ``source`` never changes;
    - re-activating an archived, otherwise unchanged schedule keeps its version (its definition
      did not change) and reports ``updated`` (its state did);
    - a schedule paused by an operator stays paused through a changed definition, unless the
      change is to ``enabled`` itself.
    """
    key = _storable_key(definition.name)
    digest = definition.definition_hash()
    for _attempt in range(2):
        row = conn.execute(
            select(schedules).where(schedules.c.name_key == key).with_for_update()
        ).first()
        if row is None:
            if _insert(
                conn,
                definition,
                key=key,
                digest=digest,
                source=source,
                first_tick_ms=first_tick_ms,
                now_ms=now_ms,
            ):
                return UpsertResult(definition.name, "created", 1)
            continue  # a concurrent upsert created it first: treat it as an update of that row
        return _update(
            conn,
            row,
            definition,
            digest=digest,
            source=source,
            first_tick_ms=first_tick_ms,
            now_ms=now_ms,
        )
    raise AssertionError(f"schedule {definition.name!r} neither inserted nor found")


def _plan(definition: Definition, first_tick_ms: int | None) -> dict[str, Any]:
    """State and next tick of a created, changed or re-activated schedule, as column values."""
    return {
        name: getattr(value, "value", value)
        for name, value in plan_values(definition, first_tick_ms).items()
    }


def _operator_paused(row: Row[Any], definition: Definition) -> bool:
    """A pause from the CLI/API survives a changed definition unless ``enabled`` itself changed
    (config's own way to pause or resume); archived schedules come back active as SPEC §3 says."""
    if row.state != ScheduleState.PAUSED.value:
        return False
    was_enabled = bool((row.definition or {}).get("enabled", True))
    return was_enabled == definition.enabled


def _insert(
    conn: Connection,
    definition: Definition,
    *,
    key: str,
    digest: str,
    source: Source,
    first_tick_ms: int | None,
    now_ms: int,
) -> bool:
    stmt = (
        insert_into(schedules, conn.dialect.name)
        .values(
            name=definition.name,
            name_key=key,
            definition=definition.to_json(),
            definition_hash=digest,
            version=1,
            source=source.value,
            epoch=0,
            created_at_ms=now_ms,
            updated_at_ms=now_ms,
            **_plan(definition, first_tick_ms),
        )
        .on_conflict_do_nothing(index_elements=[schedules.c.name_key])
        .returning(schedules.c.id)
    )
    return conn.execute(stmt).first() is not None


def _update(
    conn: Connection,
    row: Row[Any],
    definition: Definition,
    *,
    digest: str,
    source: Source,
    first_tick_ms: int | None,
    now_ms: int,
) -> UpsertResult:
    archived = row.state == ScheduleState.ARCHIVED.value
    same = row.definition_hash == digest
    if (source is Source.CONFIG and row.source == Source.API.value) or (same and not archived):
        return UpsertResult(row.name, "unchanged", row.version)
    version = row.version if same else row.version + 1
    planned = _plan(definition, first_tick_ms)
    if _operator_paused(row, definition):
        planned.update(
            state=ScheduleState.PAUSED.value, state_reason=row.state_reason, next_due_ms=None
        )
    conn.execute(
        update(schedules)
        .where(schedules.c.id == row.id)
        .values(
            name=definition.name,
            definition=definition.to_json(),
            definition_hash=digest,
            version=version,
            updated_at_ms=now_ms,
            **planned,
        )
    )
    return UpsertResult(definition.name, "updated", version)


def archive_missing(
    conn: Connection, keep_names: Sequence[str], source: Source, now_ms: int
) -> list[str]:
    keep = {name_key(name) for name in keep_names}
    rows = conn.execute(
        select(schedules.c.id, schedules.c.name, schedules.c.name_key).where(
            schedules.c.source == source.value,
            schedules.c.state != ScheduleState.ARCHIVED.value,
        )
    ).all()
    gone = [row for row in rows if row.name_key not in keep]
    for chunk in iter_chunks(gone, IN_CHUNK):
        conn.execute(
            update(schedules)
            .where(schedules.c.id.in_([row.id for row in chunk]))
            .values(
                state=ScheduleState.ARCHIVED.value,
                next_tick_ms=None,
                next_due_ms=None,
                failures=0,
                state_reason=None,
                buffered_tick_ms=None,
                updated_at_ms=now_ms,
            )
        )
    return sorted(row.name for row in gone)


def set_state(
    conn: Connection,
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
        .where(schedules.c.name_key == name_key(name))
        .values(
            **state_values(state, next_tick_ms, next_due_ms, reason),
            failures=0,
            updated_at_ms=now_ms,
        )
    )
    if result.rowcount == 0:
        raise ScheduleNotFound(name)
    record = get(conn, name)
    assert record is not None
    return record


def delete_schedule(conn: Connection, name: str) -> bool:
    result = conn.execute(delete(schedules).where(schedules.c.name_key == name_key(name)))
    return result.rowcount > 0


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


def history(conn: Connection, name: str, limit: int, before_id: int | None) -> list[StoredEvent]:
    if limit < 1:
        raise InvalidArgument(f"history limit must be at least 1; got {limit}")
    query = _events_query().where(audit.c.schedule_key == name_key(name))
    if before_id is not None:
        query = query.where(audit.c.id < before_id)
    rows = conn.execute(query.order_by(audit.c.id.desc()).limit(limit))
    return [to_event(row) for row in rows]


def find_enqueued(conn: Connection, task_id: str) -> StoredEvent | None:
    row = conn.execute(_events_query().where(audit.c.task_id == task_id, ENQUEUED)).first()
    return None if row is None else to_event(row)


_NO_TICK = 2**62
"""Above every tick: a schedule without a next tick protects none of its records."""


def prune_history(conn: Connection, names: Sequence[str], keep: int) -> int:
    """One DELETE per ``PRUNE_CHUNK`` schedules, below each one's ``keep``-th newest event.

    Two kinds of record survive whatever ``keep`` says, because the round relies on them: the
    newest automatic ``enqueued`` record (the overlap gate finds the previous run through it), and
    every record at or after the schedule's next tick (the dedup proof of a tick whose advance has
    not landed yet). A window over each schedule's records (the ``(schedule_key, id)`` index)
    ranks them, so one statement settles hundreds of schedules.
    """
    if keep < 0:
        raise InvalidArgument(f"keep must be 0 or more; got {keep}")
    removed = 0
    for chunk in iter_chunks(sorted({name_key(name) for name in names}), PRUNE_CHUNK):
        result = conn.execute(delete(audit).where(audit.c.id.in_(_prunable(list(chunk), keep))))
        removed += result.rowcount
    return removed


def _prunable(keys: list[str], keep: int) -> Any:
    """The ids of the chunk's surplus records, in one SELECT (see ``prune_history``)."""
    own = audit.c.schedule_key
    auto_enqueued = and_(ENQUEUED, audit.c.trigger == Trigger.AUTO.value)
    ranked = (
        select(
            audit.c.id,
            audit.c.tick_ms,
            own.label("key"),
            func.row_number().over(partition_by=own, order_by=audit.c.id.desc()).label("rank"),
            func.max(case((auto_enqueued, audit.c.id), else_=None))
            .over(partition_by=own)
            .label("newest_enqueued"),
        )
        .where(own.in_(keys))
        .subquery("ranked")
    )
    next_tick = func.coalesce(schedules.c.next_tick_ms, _NO_TICK)
    return (
        select(ranked.c.id)
        .select_from(ranked.outerjoin(schedules, schedules.c.name_key == ranked.c.key))
        .where(
            ranked.c.rank > keep,
            ranked.c.id != func.coalesce(ranked.c.newest_enqueued, -1),
            ranked.c.tick_ms < next_tick,
        )
    )


def counts_by_state(conn: Connection) -> dict[str, int]:
    counts = {state.value: 0 for state in ScheduleState}
    rows = conn.execute(select(schedules.c.state, func.count()).group_by(schedules.c.state)).all()
    counts.update((state, int(count)) for state, count in rows)
    return counts


def due_backlog(conn: Connection, now_ms: int) -> int:
    query = select(func.count()).select_from(schedules).where(schedules.c.next_due_ms <= now_ms)
    return int(conn.execute(query).scalar_one())
