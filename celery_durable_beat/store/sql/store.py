"""``SqlStore``: the store contract (``store/base.py``) on PostgreSQL and SQLite.

This module owns connections and transactions; the statements live beside it: the round's hot
path in ``round.py``, control-plane queries in ``admin.py``, schema work in ``schema.py``,
engine settings and the store clock in ``engine.py``. The store lease (``lease/sql.py``) runs its
own statements on the fence row through ``write_transaction``.

Clock: on PostgreSQL ``now_ms`` is the server's ``clock_timestamp()``; SQLite has no server, so it
is this host's clock, which is also the only clock every process sharing the file can see.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from celery_durable_beat.model import Definition, ScheduleState, Source, StateReason
from celery_durable_beat.store.rules import check_advances, check_at_least
from celery_durable_beat.store.sql import actions as sql_actions
from celery_durable_beat.store.sql import admin as sql_admin
from celery_durable_beat.store.sql import config_sync as sql_sync
from celery_durable_beat.store.sql import redelivery as sql_redelivery
from celery_durable_beat.store.sql import round as sql_round
from celery_durable_beat.store.sql import schema as sql_schema
from celery_durable_beat.store.sql.engine import HOST_CLOCK, PG_NOW, LazyEngine, limit_idle
from celery_durable_beat.store.sql.watchdog import unbounded
from celery_durable_beat.store.tables import DEFAULT_NAMESPACE, fence, schedules
from celery_durable_beat.store.values import (
    ActionEntry,
    Advance,
    AuditEvent,
    ConfigChange,
    DueSchedule,
    LeaderInfo,
    Recheck,
    RedeliveryCandidate,
    ScheduleRecord,
    StoredAction,
    StoredDigest,
    StoredEvent,
    UpsertResult,
)

if TYPE_CHECKING:
    from celery_durable_beat.store.base import Store

T = TypeVar("T")


class SqlStore(LazyEngine):
    """The durable store on a SQLAlchemy URL (``postgresql://…`` or ``sqlite:///…``), seen
    through one namespace (SPEC §16): every read and write is of that namespace's rows and
    fenced by its own epoch; None is the default namespace (stored as ``''``)."""

    def __init__(
        self, url: str, *, stall_timeout_s: float | None = None, namespace: str | None = None
    ) -> None:
        super().__init__(url)
        self.namespace = namespace
        ns = DEFAULT_NAMESPACE if namespace is None else namespace
        self._ns = ns
        # PostgreSQL ends a round's write left idle this long: a leader frozen inside it (SIGSTOP,
        # a VM pause) must not keep schedule rows locked from the next leader (engine.limit_idle).
        self._stall_timeout_ms = None if stall_timeout_s is None else round(stall_timeout_s * 1000)
        # Parsed definitions of due rows, bounded: a schedule due every round is parsed once.
        self._definitions = sql_round.DefinitionCache()

    def _single_read(self, query: Callable[[Connection], T]) -> T:
        """One SELECT on PostgreSQL in autocommit: no BEGIN/ROLLBACK round trips (hot path)."""
        if not self._postgres:
            return self._read(query)
        with self._guard(), self._get_engine().connect() as conn:
            return query(conn.execution_options(isolation_level="AUTOCOMMIT"))

    # -- time and the round -------------------------------------------------------------------
    def now_ms(self) -> int:
        if not self._postgres:
            return HOST_CLOCK.now_ms()
        return self._single_read(lambda conn: int(conn.execute(select(PG_NOW)).scalar_one()))

    def earliest_due_ms(self) -> int | None:
        query = select(func.min(schedules.c.next_due_ms)).where(schedules.c.namespace == self._ns)
        value = self._single_read(lambda conn: conn.execute(query).scalar())
        return None if value is None else int(value)

    def clock_and_earliest_due(self) -> tuple[int, int | None]:
        """The store's clock and the earliest due instant, in one round trip."""
        earliest = (
            select(func.min(schedules.c.next_due_ms))
            .where(schedules.c.namespace == self._ns)
            .scalar_subquery()
        )
        if not self._postgres:
            value = self._read(lambda conn: conn.execute(select(earliest)).scalar())
            return HOST_CLOCK.now_ms(), None if value is None else int(value)
        row = self._single_read(lambda conn: conn.execute(select(PG_NOW, earliest)).one())
        return int(row[0]), None if row[1] is None else int(row[1])

    @property
    def settles_beside_claims(self) -> bool:
        """Rule 12 on PostgreSQL (pooled connections, row-level writes); SQLite's one writer
        would only make the claim wait for the settle."""
        return self._postgres

    @contextmanager
    def claim_due(
        self, now_ms: int, limit: int, excluding: Collection[int] = ()
    ) -> Iterator[SqlClaim]:
        """The due rows, read in one short transaction that has committed before the block
        runs: nothing is locked while the round publishes (rule 2; SPEC §3)."""
        check_at_least("claim_due limit", limit, 1)
        # A write transaction: an unreadable definition is quarantined on the way (round.due).
        with self._tx() as conn:
            due = sql_round.due(conn, self._ns, now_ms, limit, self._definitions, excluding)
        yield SqlClaim(self, due)

    def settle(
        self, events: Sequence[AuditEvent], advances: Sequence[Advance], epoch: int
    ) -> list[bool]:
        """Audit records, then advances, in one short transaction, each statement fenced."""
        if not events and not advances:
            return []
        check_advances(advances)
        with self._tx() as conn:
            if self._postgres and self._stall_timeout_ms is not None:
                limit_idle(conn, self._stall_timeout_ms)
            sql_round.record(conn, events, epoch, self._ns)
            applied = sql_round.advance(conn, advances, epoch, self._ns) if advances else set()
        return [item.schedule_id in applied for item in advances]

    def register_epoch(self, epoch: int) -> None:
        self._write(lambda conn: sql_round.register_epoch(conn, epoch, self._ns))

    def redelivery_candidates(self, now_ms: int, limit: int) -> list[RedeliveryCandidate]:
        check_at_least("redelivery_candidates limit", limit, 1)
        definitions = self._definitions
        return self._single_read(
            lambda conn: sql_redelivery.candidates(conn, self._ns, now_ms, limit, definitions)
        )

    def settle_redeliveries(
        self, events: Sequence[AuditEvent], rechecks: Sequence[Recheck], epoch: int
    ) -> None:
        """Rule 11: one short transaction, fenced like ``settle``."""
        if not events and not rechecks:
            return
        with self._tx() as conn:
            sql_redelivery.settle(conn, self._ns, events, rechecks, epoch)

    def leader_info(self) -> LeaderInfo:
        query = select(fence.c.holder, fence.c.epoch, fence.c.expires_at_ms).where(
            fence.c.namespace == self._ns
        )
        row = self._read(lambda conn: conn.execute(query).first())
        if row is None:
            return LeaderInfo(holder=None, epoch=0, expires_at_ms=None)
        return LeaderInfo(holder=row.holder, epoch=row.epoch, expires_at_ms=row.expires_at_ms)

    # -- schema -------------------------------------------------------------------------------
    def ensure_schema(self) -> None:
        self._write(lambda conn: sql_schema.ensure(conn, self.shown_url, self._ns))

    def migrate(self) -> str:
        with unbounded():  # its DDL may rightly take minutes, with an operator watching
            return self._write(lambda conn: sql_schema.upgrade(conn, self.shown_url, self._ns))

    # -- definitions, history, status (sql_admin) ---------------------------------------------
    def get(self, name: str) -> ScheduleRecord | None:
        return self._read(lambda conn: sql_admin.get(conn, self._ns, name))

    def list_schedules(self) -> list[ScheduleRecord]:
        return self._read(lambda conn: sql_admin.list_schedules(conn, self._ns))

    def page_schedules(
        self, contains: str, state: ScheduleState | None, offset: int, limit: int
    ) -> tuple[list[ScheduleRecord], int]:
        return self._read(
            lambda conn: sql_admin.page_schedules(conn, self._ns, contains, state, offset, limit)
        )

    def upsert(
        self, definition: Definition, source: Source, first_tick_ms: int | None, now_ms: int
    ) -> UpsertResult:
        return self._write(
            lambda conn: sql_admin.upsert(conn, self._ns, definition, source, first_tick_ms, now_ms)
        )

    def definition_digests(self, names: Sequence[str]) -> list[StoredDigest]:
        return self._read(lambda conn: sql_sync.definition_digests(conn, self._ns, names))

    def sync_config(
        self,
        changes: Sequence[ConfigChange],
        epoch: int,
        now_ms: int,
        app: str | None = None,
    ) -> list[UpsertResult]:
        if not changes:
            return []
        with self._tx() as conn:
            if self._postgres and self._stall_timeout_ms is not None:
                limit_idle(conn, self._stall_timeout_ms)  # a frozen leader frees the fence lock
            return sql_sync.sync_config(conn, self._ns, changes, epoch, now_ms, app)

    def set_state(
        self,
        name: str,
        state: ScheduleState,
        now_ms: int,
        next_tick_ms: int | None = None,
        next_due_ms: int | None = None,
        reason: StateReason | None = None,
    ) -> ScheduleRecord:
        return self._write(
            lambda conn: sql_admin.set_state(
                conn,
                self._ns,
                name,
                state,
                now_ms=now_ms,
                next_tick_ms=next_tick_ms,
                next_due_ms=next_due_ms,
                reason=reason,
            )
        )

    def delete(self, name: str) -> bool:
        return self._write(lambda conn: sql_admin.delete_schedule(conn, self._ns, name))

    def record_manual(self, event: AuditEvent) -> None:
        self._write(lambda conn: sql_admin.record_manual(conn, self._ns, event))

    def record_backfill(self, events: Sequence[AuditEvent]) -> None:
        if events:
            self._write(lambda conn: sql_actions.record_backfill(conn, self._ns, events))

    def record_action(self, entry: ActionEntry, keep: int) -> None:
        self._write(lambda conn: sql_actions.record_action(conn, self._ns, entry, keep))

    def actions(
        self, name: str | None, limit: int, before_id: int | None = None
    ) -> list[StoredAction]:
        return self._read(
            lambda conn: sql_actions.list_actions(conn, self._ns, name, limit, before_id)
        )

    def enqueued_among(self, task_ids: Sequence[str]) -> set[str]:
        if not task_ids:
            return set()
        return self._read(lambda conn: sql_round.enqueued_among(conn, task_ids))

    def history_extent(self, name: str) -> tuple[int, int | None]:
        return self._read(lambda conn: sql_actions.history_extent(conn, self._ns, name))

    def history(self, name: str, limit: int, before_id: int | None = None) -> list[StoredEvent]:
        return self._read(lambda conn: sql_admin.history(conn, self._ns, name, limit, before_id))

    def find_enqueued(self, task_id: str) -> StoredEvent | None:
        return self._read(lambda conn: sql_admin.find_enqueued(conn, self._ns, task_id))

    def prune_history(self, names: Sequence[str], keep: int) -> int:
        return self._write(lambda conn: sql_admin.prune_history(conn, self._ns, names, keep))

    def counts_by_state(self) -> dict[str, int]:
        return self._read(lambda conn: sql_admin.counts_by_state(conn, self._ns))

    def due_backlog(self, now_ms: int) -> int:
        return self._read(lambda conn: sql_admin.due_backlog(conn, self._ns, now_ms))


class SqlClaim:
    """The due rows of one round (see ``Claim``); it holds no transaction."""

    schedules: Sequence[DueSchedule]

    def __init__(self, store: SqlStore, due: Sequence[DueSchedule]) -> None:
        self._store = store
        self.schedules = due

    def enqueued_task_ids(self, task_ids: Sequence[str]) -> set[str]:
        return self._store._single_read(lambda conn: sql_round.enqueued_among(conn, task_ids))


if TYPE_CHECKING:

    def _conforms(store: SqlStore) -> Store:
        """mypy proves here that SqlStore keeps the whole Store protocol."""
        return store
