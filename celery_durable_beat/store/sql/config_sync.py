"""Config sync's statements on SQL (store rule 7): one read to diff, then fenced batches.

A batch is one transaction of a constant number of statements whatever its size: the fence
lock, one SELECT of the batch's rows, one INSERT for the new ones, one UPDATE (executemany) for
the changed ones, one UPDATE for the archived ones and one INSERT of ``replanned`` records.

Fencing: the first statement is an UPDATE of the fence row that matches only while the row's
epoch is not newer than the writer's. It takes the row's lock, so ``register_epoch`` (an UPDATE
of the same row) waits for this batch to commit, and a bump that committed first makes it match
nothing: the check and the write are ordered by the lock, not by a read before the write.
The lock is held for one batch (a few hundred rows), and the caller bounds how long a frozen
leader can hold it (``limit_idle``), so a new leader is never stalled for long.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    bindparam,
    column,
    literal_column,
    or_,
    select,
    table,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from celery_durable_beat.ids import name_key
from celery_durable_beat.model import Definition, ScheduleState, Source, canonical_hash
from celery_durable_beat.store.rules import (
    archive_values,
    check_changes,
    column_values,
    decide_change,
    iter_chunks,
    refuse_stale,
)
from celery_durable_beat.store.sql.admin import to_stored_row
from celery_durable_beat.store.sql.engine import IN_CHUNK, insert_into
from celery_durable_beat.store.tables import CONFIG_ROWS, audit, fence, schedules
from celery_durable_beat.store.values import (
    ConfigChange,
    StoredDigest,
    StoredRow,
    UpsertDecision,
    UpsertOutcome,
    UpsertResult,
)


def definition_digests(conn: Connection, ns: str, names: Sequence[str]) -> list[StoredDigest]:
    """Rule 7's reads: five narrow columns, never the definitions themselves, of the
    namespace's config rows not archived (the partial index ``CONFIG_ROWS`` on
    ``(namespace, name_key)`` finds them) and of the rows named (by their unique key,
    ``IN_CHUNK`` at a time)."""
    query = select(
        schedules.c.name,
        schedules.c.name_key,
        schedules.c.source,
        schedules.c.state,
        schedules.c.definition_hash,
        schedules.c.config_app,
    )
    mine = schedules.c.namespace == ns
    found = {
        row.name_key: row
        for row in conn.execute(
            query.where(mine, CONFIG_ROWS, schedules.c.state != literal_column("'archived'"))
        )
    }
    keys = sorted({name_key(name) for name in names}.difference(found))
    for chunk in iter_chunks(keys, IN_CHUNK):
        found.update((row.name_key, row) for row in conn.execute(
            query.where(mine, schedules.c.name_key.in_(chunk))
        ))  # fmt: skip
    return [
        StoredDigest(
            row.name,
            Source(row.source),
            ScheduleState(row.state),
            row.definition_hash,
            row.config_app,
        )
        for row in found.values()
    ]


def lock_fence(conn: Connection, ns: str, epoch: int) -> None:
    """Hold the namespace's fence row for this transaction, or raise StaleEpoch if a newer
    epoch is in it."""
    matched = conn.execute(
        update(fence)
        .where(fence.c.namespace == ns, fence.c.epoch <= epoch)
        .values(epoch=fence.c.epoch)
    ).rowcount
    if matched:
        return
    newest = conn.execute(select(fence.c.epoch).where(fence.c.namespace == ns)).scalar()
    if newest is not None:  # no fence row (hand-made schema): epoch 0, as everywhere else
        refuse_stale(epoch, int(newest), "config sync")


def sync_config(
    conn: Connection,
    ns: str,
    changes: Sequence[ConfigChange],
    epoch: int,
    now_ms: int,
    app: str | None = None,
) -> list[UpsertResult]:
    """Apply one batch of config differences (rule 7); see the module docstring. ``app``, the
    syncing app's ``main`` name, is stamped on every config row the batch keeps (``config_app``),
    so another app in the namespace archives none of them (SPEC §16)."""
    keys = check_changes(changes)
    lock_fence(conn, ns, epoch)
    rows = _rows(conn, ns, keys)
    decisions = [
        decide_change(rows.get(key), change, now_ms)
        for change, key in zip(changes, keys, strict=True)
    ]
    stamp = {"epoch": epoch, "updated_at_ms": now_ms}
    created = _insert(conn, ns, changes, keys, decisions, stamp)
    _update(conn, changes, keys, rows, decisions, stamp)
    _record_dropped(conn, ns, decisions, epoch, now_ms)
    if app is not None:
        _stamp_app(conn, ns, keys, decisions, app)
    # A row created between the read and the insert can only be the API's (config rows are
    # written under the fence): config leaves it alone.
    ignored = UpsertOutcome.IGNORED
    return [
        UpsertResult(d.name, ignored if _lost(d, key, created) else d.status, d.version)
        for d, key in zip(decisions, keys, strict=True)
    ]


def _lost(decision: UpsertDecision, key: str, created: set[str]) -> bool:
    return decision.status is UpsertOutcome.CREATED and key not in created


def _stamp_app(
    conn: Connection, ns: str, keys: Sequence[str], decisions: Sequence[UpsertDecision], app: str
) -> None:
    """One UPDATE: the batch's config rows that stay in the config carry ``app`` as their
    syncing app (rows synced before namespaces, or by another app, are adopted)."""
    kept = [
        key
        for key, decision in zip(keys, decisions, strict=True)
        if decision.status
        in (UpsertOutcome.CREATED, UpsertOutcome.UPDATED, UpsertOutcome.UNCHANGED)
    ]
    if kept:
        conn.execute(
            update(schedules)
            .where(
                schedules.c.namespace == ns,
                schedules.c.name_key.in_(kept),
                CONFIG_ROWS,
                or_(schedules.c.config_app.is_(None), schedules.c.config_app != app),
            )
            .values(config_app=app)
        )


def _rows(conn: Connection, ns: str, keys: Sequence[str]) -> dict[str, StoredRow]:
    """The batch's rows as they are now, locked on PostgreSQL (SQLite's write lock covers it)."""
    query = select(
        schedules.c.id,
        schedules.c.name,
        schedules.c.name_key,
        schedules.c.source,
        schedules.c.state,
        schedules.c.definition_hash,
        schedules.c.version,
        schedules.c.next_tick_ms,
        schedules.c.next_due_ms,
        schedules.c.definition,
        schedules.c.state_reason,
        schedules.c.buffered_tick_ms,
    ).where(schedules.c.namespace == ns, schedules.c.name_key.in_(list(keys)))
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    return {row.name_key: to_stored_row(row) for row in conn.execute(query)}


def _insert(
    conn: Connection,
    ns: str,
    changes: Sequence[ConfigChange],
    keys: Sequence[str],
    decisions: Sequence[UpsertDecision],
    stamp: dict[str, Any],
) -> set[str]:
    """One INSERT of every new row; the keys it created (a conflicting one is left alone)."""
    rows = [
        _new_row(change.definition, key, {**stamp, **column_values(decision.values or {})}, ns)
        for change, key, decision in zip(changes, keys, decisions, strict=True)
        if decision.status is UpsertOutcome.CREATED and change.definition is not None
    ]
    if not rows:
        return set()
    if conn.dialect.driver == "psycopg":
        return _insert_copied(conn, rows)
    stmt = insert_into(schedules, conn.dialect.name).on_conflict_do_nothing(
        index_elements=[schedules.c.namespace, schedules.c.name_key]
    )
    inserted = conn.execute(
        stmt, [{**row, "definition": json.loads(row["definition"])} for row in rows]
    ).rowcount
    wanted = {row["name_key"] for row in rows}
    if inserted == len(rows):
        return wanted
    taken = select(schedules.c.name_key).where(
        schedules.c.namespace == ns,
        schedules.c.name_key.in_(list(wanted)),
        schedules.c.source == Source.API.value,
    )
    return wanted - set(conn.execute(taken).scalars())


def _new_row(definition: Definition, key: str, values: dict[str, Any], ns: str) -> dict[str, Any]:
    """A created row; its definition as canonical JSON text, made once for the hash too."""
    canonical = definition.canonical_json()
    return {
        "namespace": ns,
        "name": definition.name,
        "name_key": key,
        "definition": canonical,
        "definition_hash": canonical_hash(canonical),
        "version": 1,
        "source": Source.CONFIG.value,
        "created_at_ms": values["updated_at_ms"],
        **values,
    }


_STAGE = "durable_beat_sync_stage"
"""A temporary table, dropped at commit, that PostgreSQL's COPY fills with a batch's new rows."""

_STAGED = (
    "namespace",
    "name",
    "name_key",
    "definition",
    "definition_hash",
    "version",
    "source",
    "state",
    "next_tick_ms",
    "next_due_ms",
    "failures",
    "epoch",
    "created_at_ms",
    "updated_at_ms",
    "state_reason",
    "buffered_tick_ms",
    "streak_from_ms",
)

_CREATE_STAGE = text(
    "CREATE TEMPORARY TABLE durable_beat_sync_stage ON COMMIT DROP AS "
    "SELECT namespace, name, name_key, definition, definition_hash, version, source, state, "
    "next_tick_ms, next_due_ms, failures, epoch, created_at_ms, updated_at_ms, state_reason, "
    "buffered_tick_ms, streak_from_ms "
    "FROM durable_beat_schedules WITH NO DATA"
)


def _insert_copied(conn: Connection, rows: Sequence[dict[str, Any]]) -> set[str]:
    """PostgreSQL: COPY the rows into a stage, then one INSERT … SELECT … ON CONFLICT.

    Why: a pipelined executemany still paid a round of protocol work per row, half of a first
    start of 20,000 entries; COPY streams the batch as one, and RETURNING names the rows this
    INSERT created (a conflicting one is the API's, created since the read: left alone).
    """
    from psycopg import sql as pg_sql  # the postgres extra's driver; SQLite installs lack it

    conn.execute(_CREATE_STAGE)
    copy_stmt = pg_sql.SQL("COPY {} ({}) FROM STDIN").format(
        pg_sql.Identifier(_STAGE), pg_sql.SQL(", ").join(map(pg_sql.Identifier, _STAGED))
    )
    raw = conn.connection.driver_connection
    assert raw is not None  # a Connection in a transaction holds its DBAPI connection
    with raw.cursor() as cursor, cursor.copy(copy_stmt) as copy:
        for row in rows:
            copy.write_row([row[name] for name in _STAGED])
    stage = table(_STAGE, *(column(name) for name in _STAGED))
    stmt = (
        pg_insert(schedules)
        .from_select(list(_STAGED), select(*stage.c))
        .on_conflict_do_nothing(index_elements=[schedules.c.namespace, schedules.c.name_key])
        .returning(schedules.c.name_key)
    )
    return set(conn.execute(stmt).scalars())


_CHANGED = (
    update(schedules)
    .where(schedules.c.id == bindparam("s_id"))
    .values(
        name=bindparam("s_name"),
        definition=bindparam("s_definition", type_=JSON()),
        definition_hash=bindparam("s_hash"),
        version=bindparam("s_version"),
        state=bindparam("s_state"),
        next_tick_ms=bindparam("s_next_tick_ms"),
        next_due_ms=bindparam("s_next_due_ms"),
        failures=bindparam("s_failures"),
        state_reason=bindparam("s_state_reason"),
        buffered_tick_ms=bindparam("s_buffered_tick_ms"),
        streak_from_ms=bindparam("s_streak_from_ms"),
        epoch=bindparam("s_epoch"),
        updated_at_ms=bindparam("s_updated_at_ms"),
    )
)


def _update(
    conn: Connection,
    changes: Sequence[ConfigChange],
    keys: Sequence[str],
    rows: dict[str, StoredRow],
    decisions: Sequence[UpsertDecision],
    stamp: dict[str, Any],
) -> None:
    """One UPDATE (executemany) of the changed rows and one of the archived ones."""
    changed: list[dict[str, Any]] = []
    archived: list[int] = []
    for change, key, decision in zip(changes, keys, decisions, strict=True):
        if decision.status is UpsertOutcome.ARCHIVED:
            archived.append(rows[key].id)
        elif decision.status is UpsertOutcome.UPDATED and change.definition is not None:
            values = column_values({**(decision.values or {}), **stamp})
            changed.append(
                {
                    "s_id": rows[key].id,
                    "s_name": change.definition.name,
                    "s_definition": change.definition.to_json(),
                    "s_hash": change.definition.definition_hash(),
                    "s_version": decision.version,
                    **{f"s_{name}": value for name, value in values.items()},
                }
            )
    if changed:
        conn.execute(_CHANGED, changed)
    if archived:
        values = column_values({**archive_values(), **stamp})
        conn.execute(update(schedules).where(schedules.c.id.in_(archived)).values(values))


def _record_dropped(
    conn: Connection, ns: str, decisions: Sequence[UpsertDecision], epoch: int, now_ms: int
) -> None:
    """One INSERT of the ``replanned`` records, fenced by the same lock as the rows."""
    rows = [
        {
            "namespace": ns,
            "schedule": event.schedule,
            "schedule_key": name_key(event.schedule),
            "tick_ms": event.tick_ms,
            "task_id": None,
            "trigger": event.trigger.value,
            "outcome": event.outcome.value,
            "reason": event.reason,
            "lag_ms": None,
            "version": event.version,
            "epoch": epoch,
            "recorded_at_ms": now_ms,
            "detail": dict(event.detail),
        }
        for event in (d.dropped for d in decisions)
        if event is not None
    ]
    if rows:
        conn.execute(audit.insert(), rows)
