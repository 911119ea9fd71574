"""The runs tables' values and statements both SQL paths share: ``sql.py`` runs them through
SQLAlchemy, ``pg_direct.py`` compiles the worker's once for psycopg. One definition each of a
run row's values, of its upsert, and of the reads beat's gates and ``status`` make.

Namespaces (rule 9 of ``base.py``): a row's ``namespace`` is its tick's (``RunKey.namespace``,
``''`` for the default, ``stored_namespace``); the reads are of one namespace and their WHERE
starts with it, so the ``(namespace, schedule_key, tick_ms)`` and ``(namespace, schedule_key,
id)`` indexes serve them as ``(schedule_key, …)`` did before namespaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.sql.elements import ColumnElement

from celery_durable_beat.ids import name_key
from celery_durable_beat.model import Trigger
from celery_durable_beat.runs.base import FINAL_RUN_STATES, RunKey, RunState, RunWrite
from celery_durable_beat.store.sql.engine import insert_into
from celery_durable_beat.store.tables import DEFAULT_NAMESPACE, ENQUEUED, audit, runs, workers
from celery_durable_beat.store.values import NAME_LENGTH

OWNER_LENGTH = 255
"""Width of the ``hostname`` column that holds the owner."""

UNFINISHED = tuple(s.value for s in RunState if s not in FINAL_RUN_STATES)
"""The stored states of a run that has not ended."""


def schedule_key_of(name: str) -> str:
    """Runs are keyed by the name key, like audit records; cut to the column (a header can
    carry any name)."""
    return name_key(name)[:NAME_LENGTH]


def stored_namespace(namespace: str | None) -> str:
    """The ``namespace`` column's value of a namespace (``''``: the default, None)."""
    return namespace or DEFAULT_NAMESPACE


def row_values(key: RunKey, state: RunState, owner: str, keep_ms: int) -> dict[str, Any]:
    """The parameters of one run row, as the direct statements name them."""
    return {
        "task_id": key.task_id,
        "namespace": stored_namespace(key.namespace),
        "schedule_key": schedule_key_of(key.schedule),
        "tick_ms": key.tick_ms,
        "trigger": key.trigger,
        "state": state.value,
        "owner": owner[:OWNER_LENGTH],
        "keep_ms": keep_ms,
    }


def write_values(item: RunWrite) -> dict[str, Any]:
    """``row_values`` of one write."""
    return row_values(item.key, item.state, item.owner, item.keep_ms)


def state_of(value: str | None) -> RunState:
    """A stored state; one this version does not know reads as ``unknown``."""
    try:
        return RunState(value)
    except ValueError:
        return RunState.UNKNOWN


def replace_run(stmt: Any, where: ColumnElement[bool] | None) -> Any:
    """The run row's upsert: on a conflict the new state, owner and expiry replace the row's,
    where ``where`` allows; the row keeps its tick, hence its namespace."""
    excluded = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[runs.c.task_id],
        set_={
            "state": excluded.state,
            "hostname": excluded.hostname,
            "updated_at_ms": excluded.updated_at_ms,
            "expires_at_ms": excluded.expires_at_ms,
        },
        where=where,
    )


def newest_enqueued(
    namespace: str, key: str, before_tick_ms: int, now: ColumnElement[Any]
) -> Select[Any]:
    """The newest ``enqueued`` automatic record of a schedule key before a tick, with its run
    (rule 7): a walk of the (namespace, schedule_key, id) index backwards."""
    return (
        select(
            audit.c.task_id,
            audit.c.tick_ms,
            audit.c.recorded_at_ms,
            runs.c.state,
            runs.c.expires_at_ms,
            now.label("now_ms"),
        )
        .select_from(audit.outerjoin(runs, runs.c.task_id == audit.c.task_id))
        .where(
            audit.c.namespace == namespace,
            audit.c.schedule_key == key,
            ENQUEUED,
            audit.c.trigger == Trigger.AUTO.value,
            audit.c.tick_ms < before_tick_ms,
        )
        .order_by(audit.c.id.desc())
        .limit(1)
    )


def newest_run(
    namespace: str, key: str, before_tick_ms: int, now: ColumnElement[Any]
) -> Select[Any]:
    """The run of the newest automatic tick of a schedule key before a tick, recorded or not
    (rule 7): a walk of the (namespace, schedule_key, tick_ms) index backwards."""
    return (
        select(
            runs.c.task_id,
            runs.c.tick_ms,
            runs.c.updated_at_ms,
            runs.c.state,
            runs.c.expires_at_ms,
            now.label("now_ms"),
        )
        .where(
            runs.c.namespace == namespace,
            runs.c.schedule_key == key,
            runs.c.trigger == Trigger.AUTO.value,
            runs.c.tick_ms < before_tick_ms,
        )
        .order_by(runs.c.tick_ms.desc())
        .limit(1)
    )


def announce(
    dialect: str, namespace: str, hostname: str, queues: Sequence[str], now: ColumnElement[Any]
) -> Any:
    """A worker's presence row (rule 8): one upsert on the primary key (namespace, hostname)."""
    stmt = insert_into(workers, dialect).values(
        namespace=namespace,
        hostname=hostname[:OWNER_LENGTH],
        queues=list(queues),
        last_seen_ms=now,
    )
    return stmt.on_conflict_do_update(
        index_elements=[workers.c.namespace, workers.c.hostname],
        set_={"queues": stmt.excluded.queues, "last_seen_ms": stmt.excluded.last_seen_ms},
    )
