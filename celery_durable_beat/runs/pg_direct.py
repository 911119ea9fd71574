"""The worker's run-state statements on PostgreSQL, each one statement compiled once per process.

Why apart from ``sql.py``'s SQLAlchemy calls: a guarded tick costs a claim and a settle, and
through a SQLAlchemy ``Connection`` each was a pool checkout with its pre-ping (a round trip),
``BEGIN``, the statement built and its cache key computed, the statement, ``COMMIT``: four round
trips and about half a millisecond of the pool process's CPU, twice a tick (bench/worker_rate.py
measured the store-claims worker at 0.05-0.14x a plain worker). Here each transition is one
autocommit statement (atomic on its own: ``INSERT … ON CONFLICT … DO UPDATE … WHERE`` or a keyed
``UPDATE``) on a connection of this process's own small pool; psycopg prepares it on the server
after a few uses. A batch of writes is one transaction of few statements (``write``). The
statements are SQLAlchemy Core (no SQL written as text), compiled once for psycopg when the
module is imported.

Each row is written with its tick's namespace (``RunKey.namespace``, rule 9 of ``base.py``); every
other statement finds its row by the task id, which names the namespace.

No pre-ping: a connection taken from the idle list that turns out dead (the server restarted,
an idle session ended) is dropped and the call retried once on a new connection. Every statement
here may be applied twice for the same call (a reply lost after the server committed): writes
set the same values again, and a claim takes a row its own owner (unique per delivery) already
holds started.

Commits are synchronous, as the server is configured: ``synchronous_commit = off`` would take
about 2.5 ms a commit off this path on a slow disk, but a PostgreSQL crash could then forget the
last claims, and a tick delivered again would run twice.

Errors: a connection that cannot be made or breaks raises ``StoreUnavailable`` (the guard's
circuit opens on it); any other database error is ``psycopg.Error``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from sqlalchemy import BigInteger, String, and_, bindparam, func, or_, select, update
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import URL

from celery_durable_beat.exceptions import StoreUnavailable
from celery_durable_beat.runs.base import RunState, WriteIf
from celery_durable_beat.runs.sql_statements import UNFINISHED as UNFINISHED_STATES
from celery_durable_beat.runs.sql_statements import replace_run, state_of
from celery_durable_beat.store.sql.engine import PG_NOW, pg_connector
from celery_durable_beat.store.tables import runs

T = TypeVar("T")

IDLE_MAX = 8
"""Most idle connections a process keeps (its pool threads, the flusher, the heartbeat)."""

_UNFINISHED = list(UNFINISHED_STATES)


@dataclass(frozen=True)
class Compiled:
    """One statement as psycopg runs it: its text and the values of its constant parameters."""

    sql: str
    defaults: Mapping[str, Any]

    def params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.defaults, **values}


def _compile(stmt: Any) -> Compiled:
    dialect = PGDialect_psycopg()  # type: ignore[no-untyped-call]
    compiled = stmt.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    return Compiled(str(compiled), dict(compiled.params))


def _param(name: str, type_: Any) -> Any:
    """A parameter each call gives (optional at compile time, so the constants can be rendered)."""
    return bindparam(name, None, type_=type_, required=False)


def _upsert(where: Any, *, claim: bool = False) -> Any:
    stmt = insert(runs).values(
        task_id=_param("task_id", String),
        namespace=_param("namespace", String),
        schedule_key=_param("schedule_key", String),
        tick_ms=_param("tick_ms", BigInteger),
        trigger=_param("trigger", String),
        state=_param("state", String),
        hostname=_param("owner", String),
        updated_at_ms=PG_NOW,
        expires_at_ms=PG_NOW + _param("keep_ms", BigInteger),
    )
    excluded = stmt.excluded
    if claim:
        where = or_(
            runs.c.expires_at_ms < excluded.updated_at_ms,
            and_(_param("retry", BigInteger) > 0, runs.c.state == RunState.RETRIED.value),
            and_(runs.c.hostname == excluded.hostname, runs.c.state == RunState.STARTED.value),
        )
    return replace_run(stmt, where)


def _set_where(*conditions: Any) -> Any:
    return (
        update(runs)
        .where(runs.c.task_id == _param("task_id", String), *conditions)
        .values(
            state=_param("state", String),
            updated_at_ms=PG_NOW,
            expires_at_ms=PG_NOW + _param("keep_ms", BigInteger),
        )
    )


_OWNED = runs.c.hostname == _param("owner", String)

CLAIM = _compile(_upsert(None, claim=True).returning(runs.c.task_id))
"""Rule 1: takes an absent, expired or (a retry) ``retried`` row; ``(task_id,)`` if it did."""
ALWAYS = _compile(_upsert(None))
OWNER = _compile(_upsert(runs.c.hostname == insert(runs).excluded.hostname))
OWNER_SETTLE = _compile(
    _upsert(runs.c.hostname == insert(runs).excluded.hostname).returning(runs.c.task_id)
)
ALWAYS_SETTLE = _compile(_upsert(None).returning(runs.c.task_id))
_EXCLUDED = insert(runs).excluded
_UNLESS_ENDED_OTHERWISE = or_(
    runs.c.state.in_(_UNFINISHED),
    runs.c.state == _EXCLUDED.state,
    runs.c.expires_at_ms < _EXCLUDED.updated_at_ms,
)
"""``WriteIf.UNLESS_ENDED_OTHERWISE`` (a hard time limit): as ``runs/sql.py`` writes it."""
UNLESS_ENDED_OTHERWISE = _compile(_upsert(_UNLESS_ENDED_OTHERWISE))
UNLESS_ENDED_OTHERWISE_SETTLE = _compile(_upsert(_UNLESS_ENDED_OTHERWISE).returning(runs.c.task_id))
_NOT_STARTED = or_(
    runs.c.state == RunState.RETRIED.value,
    runs.c.expires_at_ms < _EXCLUDED.updated_at_ms,
)
"""``WriteIf.NOT_STARTED`` (a delivery discarded before it ran): as ``runs/sql.py`` writes it."""
NOT_STARTED = _compile(_upsert(_NOT_STARTED))
NOT_STARTED_SETTLE = _compile(_upsert(_NOT_STARTED).returning(runs.c.task_id))
UNFINISHED = _compile(_set_where(runs.c.state.in_(_UNFINISHED)))
UNFINISHED_SETTLE = _compile(_set_where(runs.c.state.in_(_UNFINISHED)).returning(runs.c.task_id))
RELEASE = _compile(_set_where(_OWNED))
HEARTBEAT = _compile(
    update(runs)
    .where(
        runs.c.task_id == _param("task_id", String),
        _OWNED,
        runs.c.state == RunState.STARTED.value,
    )
    .values(updated_at_ms=PG_NOW, expires_at_ms=PG_NOW + _param("keep_ms", BigInteger))
)
STATE = _compile(
    runs.select().with_only_columns(runs.c.state).where(runs.c.task_id == _param("task_id", String))
)


_COLUMNS = (
    "task_id", "namespace", "schedule_key", "tick_ms", "trigger", "state", "owner", "keep_ms"
)  # fmt: skip
_SAME_NAMES = 6
"""The first columns of ``_COLUMNS``, named as in the table; ``owner`` is ``hostname``."""
_ARRAYS = {name: f"{name}s" for name in _COLUMNS}
"""The parameter of each column's array in the statements of many rows."""


def _upsert_many(where: Any) -> Any:
    """``_upsert`` for many rows in one statement: one array a column, unnested, in the order of
    their task ids (two such statements lock the rows they share in one order). The rows must
    have distinct task ids: one ``INSERT … ON CONFLICT`` cannot change a row twice."""
    kinds = {"tick_ms": BigInteger, "keep_ms": BigInteger}
    arrays = [_param(_ARRAYS[name], ARRAY(kinds.get(name, String))) for name in _COLUMNS]
    rows = func.unnest(*arrays).table_valued(*_COLUMNS).render_derived(name="batch")
    given = [rows.c[name] for name in _COLUMNS[: _SAME_NAMES + 1]]  # up to ``owner``
    stmt = insert(runs).from_select(
        [*_COLUMNS[:_SAME_NAMES], "hostname", "updated_at_ms", "expires_at_ms"],
        select(*given, PG_NOW, PG_NOW + rows.c.keep_ms).order_by(rows.c.task_id),
    )
    return replace_run(stmt, where)


_WRITE_MANY = {
    WriteIf.ALWAYS: _compile(_upsert_many(None)),
    WriteIf.OWNER: _compile(_upsert_many(runs.c.hostname == insert(runs).excluded.hostname)),
    WriteIf.UNLESS_ENDED_OTHERWISE: _compile(_upsert_many(_UNLESS_ENDED_OTHERWISE)),
    WriteIf.NOT_STARTED: _compile(_upsert_many(_NOT_STARTED)),
}
"""Writes of one kind to many ticks, one statement (``UNFINISHED``, an update, has none)."""


def _columns_of(rows: Sequence[Values]) -> dict[str, list[Any]]:
    return {_ARRAYS[name]: [row[name] for row in rows] for name in _COLUMNS}


_BROKEN = (psycopg.OperationalError, psycopg.InterfaceError)

_WRITE = {
    WriteIf.ALWAYS: ALWAYS,
    WriteIf.OWNER: OWNER,
    WriteIf.UNFINISHED: UNFINISHED,
    WriteIf.UNLESS_ENDED_OTHERWISE: UNLESS_ENDED_OTHERWISE,
    WriteIf.NOT_STARTED: NOT_STARTED,
}
_SETTLE = {
    WriteIf.ALWAYS: ALWAYS_SETTLE,
    WriteIf.OWNER: OWNER_SETTLE,
    WriteIf.UNFINISHED: UNFINISHED_SETTLE,
    WriteIf.UNLESS_ENDED_OTHERWISE: UNLESS_ENDED_OTHERWISE_SETTLE,
    WriteIf.NOT_STARTED: NOT_STARTED_SETTLE,
}

Values = Mapping[str, Any]
"""One row's parameters: task_id, namespace, schedule_key, tick_ms, trigger, state, owner,
keep_ms (``_COLUMNS``)."""


class DirectPg:
    """This process's connections for the statements above (module docstring)."""

    def __init__(self, url: URL, shown_url: str) -> None:
        self._connect = pg_connector(url)  # each exchange bounded (store/sql/bounded.py)
        self._shown_url = shown_url
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()

    # -- the transitions (rules 1, 2, 3, 5 of ``base.py``) --------------------------------------
    def claim(self, values: Values, attempt: int) -> RunState | None:
        """None if ``values`` (a ``started`` row) took the tick; else the state that refused."""
        if self.fetch_one(CLAIM, {**values, "retry": attempt}) is not None:
            return None
        found = self.fetch_one(STATE, {"task_id": values["task_id"]})
        return state_of(None if found is None else found[0])

    def settle(self, write_if: WriteIf, values: Values) -> bool:
        return self.fetch_one(_SETTLE[write_if], values) is not None

    def write(self, writes: Sequence[tuple[WriteIf, Values]]) -> None:
        """In one transaction, each tick's writes in order: grouped by kind (``_groups``), a
        group one statement of many rows (``_WRITE_MANY``: 4-32 ends cost 30-43 % less CPU a
        row than an ``executemany`` here, about a third less on the server's side,
        ``bench/claim_cost.py``) or, for ``UNFINISHED``, one ``executemany``; one write alone is
        one autocommit statement."""
        if len(writes) == 1:
            write_if, values = writes[0]
            self.execute(_WRITE[write_if], values)
            return
        self.execute_many([_statement_of(write_if, rows) for write_if, rows in _groups(writes)])

    def release(self, task_id: str, owner: str) -> None:
        """``unknown``, expired at once, if ``owner`` still holds it."""
        values = {"task_id": task_id, "owner": owner, "state": RunState.UNKNOWN.value}
        self.execute(RELEASE, {**values, "keep_ms": -1})

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        rows = [{"task_id": t, "owner": o, "keep_ms": ttl_ms} for t, o in held]
        self.execute_many([(HEARTBEAT, rows)])

    # -- statements on this process's connections ---------------------------------------------
    def fetch_one(self, statement: Compiled, values: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Run one statement; its first row, if any."""
        params = statement.params(values)
        return self._run(lambda conn: conn.execute(statement.sql, params).fetchone())

    def execute(self, statement: Compiled, values: Mapping[str, Any]) -> None:
        params = statement.params(values)
        self._run(lambda conn: conn.execute(statement.sql, params))

    def execute_many(self, batches: Sequence[tuple[Compiled, Sequence[Values]]]) -> None:
        """Every (statement, rows) of ``batches`` in one transaction, each one pipelined
        ``executemany``; one statement run once is atomic alone (autocommit, no ``BEGIN``)."""
        prepared = [(s.sql, [s.params(v) for v in rows]) for s, rows in batches if rows]
        if not prepared:
            return
        if len(prepared) == 1 and len(prepared[0][1]) == 1:
            sql, (params,) = prepared[0]
            self._run(lambda conn: conn.execute(sql, params))
            return

        def change(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction(), conn.cursor() as cur:
                for sql, rows in prepared:
                    cur.executemany(sql, rows)

        self._run(change)

    def _run(self, call: Callable[[psycopg.Connection[Any]], T]) -> T:
        conn, reused = self._take()
        try:
            result = call(conn)
        except _BROKEN as exc:
            conn.close()
            if not reused:
                raise self._unavailable(exc) from exc
            conn, _ = self._take(fresh=True)  # the idle one was dead: once more, on a new one
            try:
                result = call(conn)
            except _BROKEN as again:
                conn.close()
                raise self._unavailable(again) from again
            except BaseException:
                conn.close()
                raise
        except BaseException:
            conn.close()
            raise
        self._give(conn)
        return result

    def _take(self, *, fresh: bool = False) -> tuple[psycopg.Connection[Any], bool]:
        if not fresh:
            with self._lock:
                if self._idle:
                    return self._idle.pop(), True
        try:
            conn = self._connect(autocommit=True)
        except _BROKEN as exc:
            raise self._unavailable(exc) from exc
        # Commits stay synchronous (the server's setting): a claim is the dedup guarantee, and
        # one a PostgreSQL crash forgot would let a redelivered duplicate run.
        return conn, False

    def _give(self, conn: psycopg.Connection[Any]) -> None:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.close()
            return
        with self._lock:
            if len(self._idle) < IDLE_MAX:
                self._idle.append(conn)
                return
        conn.close()

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return StoreUnavailable(f"the durable beat store at {self._shown_url} failed: {first_line}")

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _groups(writes: Sequence[tuple[WriteIf, Values]]) -> list[tuple[WriteIf, list[Values]]]:
    """``writes`` in few statements: each write joins the first group of its kind after the
    last group holding a write of its tick, else starts a new group (first fit, not always the
    fewest). Writes of different ticks touch different rows, so only each tick's own order
    matters: it is kept (its writes land in later and later groups, never two in one), and the
    flusher's usual batch — claims' ``started`` and ends mixed, each tick once — becomes two
    statements."""
    groups: list[tuple[WriteIf, list[Values]]] = []
    last: dict[str, int] = {}  # task id -> the group of its latest write
    for write_if, values in writes:
        task_id = values["task_id"]
        after = last.get(task_id, -1)
        found = next((i for i in range(after + 1, len(groups)) if groups[i][0] is write_if), None)
        if found is None:
            groups.append((write_if, []))
            found = len(groups) - 1
        groups[found][1].append(values)
        last[task_id] = found
    return groups


def _statement_of(write_if: WriteIf, rows: list[Values]) -> tuple[Compiled, Sequence[Values]]:
    """The statement for one group of ``DirectPg.write`` and the parameters it runs with."""
    many = _WRITE_MANY.get(write_if)
    if many is None or len(rows) == 1:
        return _WRITE[write_if], rows
    return many, [_columns_of(rows)]
