"""``SqlRunStore``: run tracking and the store-backed dedup claim (``RunTracking`` and
``Claims`` in ``base.py``: a claim is its tick's run row, so tracking and dedup are one write).

One row per tick task id in ``durable_beat_runs``. Every statement is a single ``INSERT … ON
CONFLICT … DO UPDATE … WHERE`` or a keyed ``UPDATE``, so a claim is atomic on both backends:
PostgreSQL serialises conflicting inserts on the primary key (the loser re-checks the ``WHERE``
against the winner's committed row), SQLite takes the write lock up front (``BEGIN IMMEDIATE``).

Times come from the store's clock, as for the round: the heartbeat of a worker on a host with a
skewed clock still expires when the store says so. ``hostname`` holds the run's owner
(``<worker node>:<pid>:<token>``), which conditional writes compare.

Built on its own lazily created engine so that building one never connects: the worker makes
one per process (after the prefork fork), the beat's overlap gate one on first use.

Namespaces (rule 9 of ``base.py``): each row's ``namespace`` column is its tick's, written with
the row whatever the store was built with; the reads the beat and ``status`` make (tracking,
worker presence) are of the namespace it was built with (``sql_statements.py``, the statements
this module shares with ``pg_direct.py``). A claim's reads of its tick go by the primary key,
the task id, which names its namespace.

The worker's transitions (claim, write, settle, release, heartbeat) are its hot path: on
PostgreSQL through psycopg they skip SQLAlchemy's connection and statement machinery
(``pg_direct.py``: one autocommit statement each, compiled once per process, a batch of writes
few statements, ``pg_direct.DirectPg.write``); on SQLite (and another PostgreSQL driver) they
are the same statements through SQLAlchemy, below.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import and_, bindparam, exists, literal, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.elements import ColumnElement

from celery_durable_beat.exceptions import StoreError
from celery_durable_beat.model import Trigger
from celery_durable_beat.runs.base import (
    PreviousTick,
    RunKey,
    RunRecord,
    RunState,
    RunWrite,
    WorkerSeen,
    WriteIf,
)
from celery_durable_beat.runs.sql_statements import (
    OWNER_LENGTH,
    UNFINISHED,
    announce,
    newest_enqueued,
    newest_run,
    replace_run,
    row_values,
    schedule_key_of,
    state_of,
    stored_namespace,
    write_values,
)
from celery_durable_beat.store.sql.engine import HOST_CLOCK, PG_NOW, LazyEngine, insert_into
from celery_durable_beat.store.tables import ENQUEUED, audit, runs, workers

if TYPE_CHECKING:
    from celery_durable_beat.runs.base import Claims, RunTracking
    from celery_durable_beat.runs.pg_direct import DirectPg

T = TypeVar("T")


class SqlRunStore(LazyEngine):
    """The runs table on a SQLAlchemy URL (``postgresql://…`` or ``sqlite:///…``)."""

    where = "the durable beat store"
    errors: tuple[type[BaseException], ...] = (StoreError, SQLAlchemyError, OSError)

    def __init__(self, url: str, namespace: str | None = None) -> None:
        """``namespace``: the one tracking reads and worker presence are of (rule 9); None,
        the default namespace."""
        super().__init__(url)
        self.namespace = namespace
        self._ns = stored_namespace(namespace)
        self._direct_pg: DirectPg | None = None
        self._direct_ok = self._postgres and self._url.get_driver_name() == "psycopg"
        self._direct_lock = threading.Lock()
        if self._direct_ok:
            import psycopg  # the driver of this URL: what a direct statement raises

            self.errors = (*self.errors, psycopg.Error)

    @property
    def _direct(self) -> DirectPg | None:
        """The worker side's direct statements, built on first use: beat (tracking only, the
        worker side's writes never run there) does not compile them (issue 29: 12 ms)."""
        if self._direct_pg is None and self._direct_ok:
            from celery_durable_beat.runs.pg_direct import DirectPg

            with self._direct_lock:  # a worker's threads: one set of connections, closed once
                if self._direct_pg is None:
                    self._direct_pg = DirectPg(self._url, self.shown_url)
        return self._direct_pg

    def _now(self) -> ColumnElement[Any]:
        """The store's clock as an SQL expression (a bound host-clock value on SQLite)."""
        if self._postgres:
            return PG_NOW
        return literal(HOST_CLOCK.now_ms())

    def _insert(self) -> Any:
        return insert_into(runs, "postgresql" if self._postgres else "sqlite")

    # -- the worker side ----------------------------------------------------------------------
    def _row(self, key: RunKey, state: RunState, owner: str, keep_ms: int) -> Any:
        now = self._now()
        return self._insert().values(
            task_id=key.task_id,
            namespace=stored_namespace(key.namespace),
            schedule_key=schedule_key_of(key.schedule),
            tick_ms=key.tick_ms,
            trigger=key.trigger,
            state=state.value,
            hostname=owner[:OWNER_LENGTH],
            updated_at_ms=now,
            expires_at_ms=now + keep_ms,
        )

    def claim(
        self, key: RunKey, owner: str, attempt: int, ttl_ms: int, settles: Sequence[RunWrite] = ()
    ) -> RunState | None:
        """``settles`` are written first, in a transaction of their own (the guard defers no
        settle when the claims are these rows: its run ends go through tracking)."""
        self.write(settles)
        if self._direct is not None:
            return self._direct.claim(row_values(key, RunState.STARTED, owner, ttl_ms), attempt)
        stmt = self._row(key, RunState.STARTED, owner, ttl_ms)
        takeover: ColumnElement[bool] = or_(
            runs.c.expires_at_ms < stmt.excluded.updated_at_ms,
            and_(runs.c.hostname == owner[:OWNER_LENGTH], runs.c.state == RunState.STARTED.value),
        )
        if attempt > 0:  # no attempt column: any retry may take a ``retried`` row
            takeover = or_(takeover, runs.c.state == RunState.RETRIED.value)
        stmt = replace_run(stmt, takeover).returning(runs.c.task_id)

        def change(conn: Connection) -> RunState | None:
            if conn.execute(stmt).first() is not None:
                return None
            found = conn.execute(select(runs.c.state).where(runs.c.task_id == key.task_id)).scalar()
            return state_of(found)

        return self._write(change)

    def write(self, writes: Sequence[RunWrite]) -> None:
        if not writes:
            return
        if self._direct is not None:
            self._direct.write([(item.write_if, write_values(item)) for item in writes])
            return

        def change(conn: Connection) -> None:
            for item in writes:
                conn.execute(self._write_statement(item))

        self._write(change)

    def settle_many(self, writes: Sequence[RunWrite]) -> None:
        self.write(writes)

    def settle(self, write: RunWrite) -> bool:
        if self._direct is not None:
            return self._direct.settle(write.write_if, write_values(write))
        stmt = self._write_statement(write).returning(runs.c.task_id)
        return bool(self._write(lambda conn: conn.execute(stmt).first() is not None))

    def _write_statement(self, item: RunWrite) -> Any:
        if item.write_if is WriteIf.UNFINISHED:
            now = self._now()
            return (
                update(runs)
                .where(runs.c.task_id == item.key.task_id, runs.c.state.in_(UNFINISHED))
                .values(state=item.state.value, updated_at_ms=now, expires_at_ms=now + item.keep_ms)
            )
        stmt = self._row(item.key, item.state, item.owner, item.keep_ms)
        where: ColumnElement[bool] | None = None
        if item.write_if is WriteIf.OWNER:
            where = runs.c.hostname == stmt.excluded.hostname
        elif item.write_if is WriteIf.UNLESS_ENDED_OTHERWISE:
            where = or_(
                runs.c.state.in_(UNFINISHED),
                runs.c.state == stmt.excluded.state,
                runs.c.expires_at_ms < stmt.excluded.updated_at_ms,
            )
        elif item.write_if is WriteIf.NOT_STARTED:
            where = or_(
                runs.c.state == RunState.RETRIED.value,
                runs.c.expires_at_ms < stmt.excluded.updated_at_ms,
            )
        return replace_run(stmt, where)

    def release(self, task_id: str, owner: str) -> None:
        """``unknown``, expired at once: the requeued delivery claims it (as the guard's own
        give-back write does when the claims are these rows)."""
        now = self._now()
        stmt = (
            update(runs)
            .where(runs.c.task_id == task_id, runs.c.hostname == owner[:OWNER_LENGTH])
            .values(state=RunState.UNKNOWN.value, updated_at_ms=now, expires_at_ms=now - 1)
        )
        self._write(lambda conn: conn.execute(stmt))

    def state(self, task_id: str) -> RunState | None:
        query = select(runs.c.state).where(
            runs.c.task_id == task_id, runs.c.expires_at_ms >= self._now()
        )
        with self._tx(write=False) as conn:
            found = conn.execute(query).scalar()
        return None if found is None else state_of(found)

    def ever_claimed(self, task_ids: Sequence[str]) -> set[str]:
        """A claim is its tick's row, kept expired until pruned: any row (by the primary key;
        each id names its namespace)."""
        if not task_ids:
            return set()
        query = select(runs.c.task_id).where(runs.c.task_id.in_(list(task_ids)))
        with self._tx(write=False) as conn:
            return set(conn.execute(query).scalars())

    def count(self, name: str) -> None:
        """No shared counters in the store (``shared_counters`` is empty)."""

    def counters(self) -> dict[str, int]:
        return {}

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        if not held:
            return
        if self._direct is not None:
            self._direct.heartbeat([(t, o[:OWNER_LENGTH]) for t, o in held], ttl_ms)
            return
        now = self._now()
        stmt = (
            update(runs)
            .where(
                runs.c.task_id == bindparam("tid"),
                runs.c.hostname == bindparam("owner"),
                runs.c.state == RunState.STARTED.value,
            )
            .values(updated_at_ms=now, expires_at_ms=now + ttl_ms)
        )
        params = [{"tid": task_id, "owner": owner[:OWNER_LENGTH]} for task_id, owner in held]
        self._write(lambda conn: conn.execute(stmt, params))

    # -- the beat side (overlap gate) -----------------------------------------------------------
    def mark_revoked(self, key: RunKey, owner: str, keep_ms: int) -> bool:
        stmt = self._row(key, RunState.REVOKED, owner, keep_ms)
        where = or_(
            runs.c.state == RunState.RETRIED.value,
            runs.c.expires_at_ms < stmt.excluded.updated_at_ms,
        )
        stmt = replace_run(stmt, where).returning(runs.c.task_id)
        return bool(self._write(lambda conn: conn.execute(stmt).first() is not None))

    def get_run(self, task_id: str) -> RunRecord | None:
        query = select(runs).where(runs.c.namespace == self._ns, runs.c.task_id == task_id)
        with self._tx(write=False) as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        return RunRecord(
            task_id=row.task_id,
            schedule_key=row.schedule_key,
            tick_ms=row.tick_ms,
            trigger=row.trigger,
            state=state_of(row.state),
            owner=row.hostname,
            updated_at_ms=row.updated_at_ms,
            expires_at_ms=row.expires_at_ms,
            namespace=row.namespace or None,
        )

    def previous_tick(self, schedule: str, before_tick_ms: int) -> PreviousTick | None:
        """Walks the (namespace, schedule_key, id) index backwards to the first matching record,
        and the runs' (namespace, schedule_key, tick_ms) index backwards to the newest run: a
        newer run than the record is a tick that went out without it (rule 7)."""
        key, now = schedule_key_of(schedule), self._now()
        query = newest_enqueued(self._ns, key, before_tick_ms, now)
        latest = newest_run(self._ns, key, before_tick_ms, now)
        with self._tx(write=False) as conn:
            row = conn.execute(query).first()
            run = conn.execute(latest).first()
        if run is not None and (row is None or row.task_id is None or run.tick_ms > row.tick_ms):
            return PreviousTick(
                task_id=run.task_id,
                tick_ms=run.tick_ms,
                enqueued_at_ms=run.updated_at_ms,
                state=state_of(run.state),
                expires_at_ms=run.expires_at_ms,
                now_ms=int(run.now_ms),
            )
        if row is None or row.task_id is None:
            return None
        return PreviousTick(
            task_id=row.task_id,
            tick_ms=row.tick_ms,
            enqueued_at_ms=row.recorded_at_ms,
            state=None if row.state is None else state_of(row.state),
            expires_at_ms=row.expires_at_ms,
            now_ms=int(row.now_ms),
        )

    def recent_states(self, schedule: str, since_tick_ms: int | None, limit: int) -> list[RunState]:
        """One walk of the (namespace, schedule_key, tick_ms) index backwards."""
        query = select(runs.c.state).where(
            runs.c.namespace == self._ns,
            runs.c.schedule_key == schedule_key_of(schedule),
            runs.c.trigger == Trigger.AUTO.value,
        )
        if since_tick_ms is not None:
            query = query.where(runs.c.tick_ms >= since_tick_ms)
        with self._tx(write=False) as conn:
            found = conn.execute(query.order_by(runs.c.tick_ms.desc()).limit(limit)).scalars()
            return [state_of(state) for state in found]

    def states(self, task_ids: Sequence[str]) -> dict[str, RunState]:
        """One query on the primary key, however many ids (the round asks once per round)."""
        if not task_ids:
            return {}
        query = select(runs.c.task_id, runs.c.state).where(
            runs.c.namespace == self._ns, runs.c.task_id.in_(list(task_ids))
        )
        with self._tx(write=False) as conn:
            rows = conn.execute(query).all()
        return {row.task_id: state_of(row.state) for row in rows}

    def prune_runs(self, limit: int) -> int:
        """In every namespace (rule 9): only workers prune, and a pool may serve several."""
        recorded = exists(select(audit.c.id).where(audit.c.task_id == runs.c.task_id, ENQUEUED))
        doomed = (
            select(runs.c.task_id)
            .where(and_(runs.c.expires_at_ms < self._now(), ~recorded))
            .limit(limit)
        )
        stmt = runs.delete().where(runs.c.task_id.in_(doomed))
        return int(self._write(lambda conn: conn.execute(stmt).rowcount))

    def close(self) -> None:
        """The engine's pool and the direct statements' connections; idempotent."""
        if self._direct_pg is not None:
            self._direct_pg.close()
        super().close()

    # -- worker presence (rule 8) ---------------------------------------------------------------
    def announce_worker(self, hostname: str, queues: Sequence[str]) -> None:
        """One upsert on the primary key (namespace, hostname); last seen is the store's now."""
        dialect = "postgresql" if self._postgres else "sqlite"
        stmt = announce(dialect, self._ns, hostname, queues, self._now())
        self._write(lambda conn: conn.execute(stmt))

    def forget_worker(self, hostname: str) -> None:
        stmt = workers.delete().where(
            workers.c.namespace == self._ns, workers.c.hostname == hostname[:OWNER_LENGTH]
        )
        self._write(lambda conn: conn.execute(stmt))

    def live_workers(self, ttl_ms: int) -> list[WorkerSeen]:
        """One read of the namespace's rows of the (small) table; sorted here, so every database
        orders alike."""
        query = select(workers).where(
            workers.c.namespace == self._ns, workers.c.last_seen_ms >= self._now() - ttl_ms
        )
        with self._tx(write=False) as conn:
            rows = conn.execute(query).all()
        seen = [
            WorkerSeen(
                hostname=row.hostname,
                queues=tuple(str(q) for q in row.queues or ()),
                last_seen_ms=int(row.last_seen_ms),
            )
            for row in rows
        ]
        return sorted(seen, key=lambda worker: worker.hostname)


if TYPE_CHECKING:

    def _tracks(store: SqlRunStore) -> RunTracking:
        """mypy proves here that SqlRunStore keeps the whole RunTracking protocol."""
        return store

    def _claims(store: SqlRunStore) -> Claims:
        """... and the whole Claims protocol."""
        return store
