"""The store lease (the default): the SQL store's fence row as the leader lease (SPEC §7), one
row per namespace (SPEC §16), so each namespace elects its own leader.

Because the lease row *is* the fence row, each acquisition raises the store's fencing epoch in the
same UPDATE: there is no window in which a new leader holds the lease but the store still accepts
the old leader's writes. ``StoreLease`` keeps the ``Lease`` contract (``lease/base.py``) and runs
its statements in the store's own transactions (``LazyEngine.write_transaction``).

``durable_beat_fence`` holds the newest fencing epoch and, while a beat leads through the store,
who (``holder``, ``hostname:pid``), its private ``token`` and ``expires_at_ms``. Each call is one
short transaction of compare-and-set statements, judged by the database's clock inside the
statement, never by the host's:

- renew:   ``SET expires_at_ms = now + ttl WHERE token = :mine AND epoch = :acquired AND
  expires_at_ms > now``
- acquire: ``SET epoch = epoch + 1, holder, token, expires_at_ms = now + ttl
  WHERE holder IS NULL OR token IS NULL OR expires_at_ms IS NULL OR expires_at_ms <= now``
- release: ``SET holder, token, expires_at_ms = NULL WHERE token = :mine`` (the epoch stays)

Two standbys acquiring at once cannot both win: PostgreSQL re-evaluates the WHERE of the second
UPDATE against the row version the first committed, and SQLite's ``BEGIN IMMEDIATE`` serialises
writers. A lease that expired counts as free even for its former holder, so taking it back is a new
acquisition with a new epoch, as with the Redis lease whose key simply vanishes. A renewal also
requires the epoch the holder acquired: if anything registered a newer one meanwhile (a beat on a
Redis lease against the same store: a misconfiguration), the holder must not adopt it and write
beside that beat under the same epoch; it stops renewing and acquires afresh once its lease lapses.

"now" is PostgreSQL's transaction timestamp (taken when the transaction starts, so never later
than the statement: a conservative reading for both the holder and a standby), and on SQLite the
host clock, which is the only clock every process sharing the file can see.

On PostgreSQL each lease transaction also bounds how long it may wait for the row lock and how
long it may sit idle holding it: a holder frozen mid-transaction (SIGSTOP, a long GC pause) would
otherwise keep the row locked, and no standby could ever take over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from sqlalchemy import BigInteger, func, literal, or_, select, update
from sqlalchemy.engine import Connection

from celery_durable_beat.lease.base import FenceLease, LeaseRow
from celery_durable_beat.store.sql import schema as sql_schema
from celery_durable_beat.store.sql.engine import HOST_CLOCK, PG_TX_NOW
from celery_durable_beat.store.tables import DEFAULT_NAMESPACE, fence

if TYPE_CHECKING:
    from celery_durable_beat.lease.base import Lease

T = TypeVar("T")


def _now(conn: Connection) -> Any:
    if conn.dialect.name == "postgresql":
        return PG_TX_NOW
    return literal(HOST_CLOCK.now_ms(), BigInteger())


LOCK_BOUND_FLOOR_MS = 1000
"""Least time a lease transaction may wait for, or sit idle holding, the row lock. A third of a
sub-second TTL (tests use 0.3 s) is shorter than a healthy client's pause between two statements
on a loaded host, and PostgreSQL would end that session mid-renewal."""


def _bound_waits(conn: Connection, ttl_ms: int) -> None:
    """PostgreSQL: neither wait for nor hold the row lock longer than a third of the TTL (and
    ``LOCK_BOUND_FLOOR_MS`` at least)."""
    if conn.dialect.name != "postgresql":
        return
    limit = str(max(LOCK_BOUND_FLOOR_MS, ttl_ms // 3))
    conn.execute(
        select(
            func.set_config("lock_timeout", limit, True),
            func.set_config("idle_in_transaction_session_timeout", limit, True),
        )
    )


def _returned(row: Any, *, leader: bool, acquired: bool) -> LeaseRow:
    expires = None if row.expires_at_ms is None else int(row.expires_at_ms)
    return LeaseRow(
        leader=leader,
        acquired=acquired,
        epoch=int(row.epoch),
        holder=row.holder,
        expires_at_ms=expires,
        remaining_ms=None if expires is None else max(0, expires - int(row.now)),
    )


_ROW = (fence.c.epoch, fence.c.holder, fence.c.expires_at_ms)


def _acquire_or_renew(
    conn: Connection,
    ns: str,
    token: str,
    holder: str,
    ttl_ms: int,
    epoch: int | None = None,
) -> LeaseRow:
    """Renew if ``token`` holds the lease (at ``epoch``, when the caller knows which it acquired),
    else take it if free or expired, else say who leads."""
    _bound_waits(conn, ttl_ms)
    now = _now(conn)
    returning = (*_ROW, now.label("now"))
    mine = [fence.c.namespace == ns, fence.c.token == token, fence.c.expires_at_ms > now]
    if epoch is not None:
        mine.append(fence.c.epoch == epoch)
    renewed = conn.execute(
        update(fence)
        .where(*mine)
        .values(holder=holder, expires_at_ms=now + ttl_ms)
        .returning(*returning)
    ).first()
    if renewed is not None:
        return _returned(renewed, leader=True, acquired=False)
    acquire = (
        update(fence)
        .where(
            fence.c.namespace == ns,
            or_(
                fence.c.holder.is_(None),
                fence.c.token.is_(None),
                fence.c.expires_at_ms.is_(None),
                fence.c.expires_at_ms <= now,
            ),
        )
        .values(epoch=fence.c.epoch + 1, holder=holder, token=token, expires_at_ms=now + ttl_ms)
        .returning(*returning)
    )
    acquired = conn.execute(acquire).first()
    if acquired is not None:
        return _returned(acquired, leader=True, acquired=True)
    current = conn.execute(select(*returning).where(fence.c.namespace == ns)).first()
    if current is None:
        # A namespace's first lease, or a missing row (hand-made schema): seed and retry.
        sql_schema.seed_fence(conn, ns)
        acquired = conn.execute(acquire).first()
        assert acquired is not None, "the fence row was just seeded"
        return _returned(acquired, leader=True, acquired=True)
    return _returned(current, leader=False, acquired=False)


def _release(conn: Connection, ns: str, token: str) -> bool:
    """Give the lease up if ``token`` holds it (the epoch stays); True if it was held."""
    released = conn.execute(
        update(fence)
        .where(fence.c.namespace == ns, fence.c.token == token)
        .values(holder=None, token=None, expires_at_ms=None)
    )
    return bool(released.rowcount)


@runtime_checkable
class WriteTransactions(Protocol):
    """What the store lease needs of a store: its transactions and the namespace it serves
    (``SqlStore`` has them): each namespace's lease is its own fence row (SPEC §16)."""

    namespace: str | None

    def write_transaction(self, change: Callable[[Connection], T]) -> T:
        """Run ``change`` in one committed write transaction; ``StoreError`` if it fails."""


class SqlFenceRows:
    """The namespace's fence row's statements, each in one of the store's write transactions."""

    def __init__(self, store: WriteTransactions) -> None:
        self.store = store
        self.ns = DEFAULT_NAMESPACE if store.namespace is None else store.namespace

    def acquire_or_renew(self, token: str, holder: str, ttl_ms: int, epoch: int | None) -> LeaseRow:
        return self.store.write_transaction(
            lambda conn: _acquire_or_renew(conn, self.ns, token, holder, ttl_ms, epoch)
        )

    def release(self, token: str) -> bool:
        return self.store.write_transaction(lambda conn: _release(conn, self.ns, token))


class StoreLease(FenceLease):
    """Leadership through the SQL store's fence row; expiry by the database's clock."""

    def __init__(
        self,
        store: WriteTransactions,
        ttl_seconds: float = 30.0,
        *,
        holder: str | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(SqlFenceRows(store), ttl_seconds, holder=holder, token=token)
        self.store = store

    def __repr__(self) -> str:
        return f"StoreLease(holder={self.holder!r}, ttl={self.ttl_seconds:g}s)"


if TYPE_CHECKING:

    def _conforms(lease: StoreLease) -> Lease:
        """mypy proves here that StoreLease keeps the Lease protocol."""
        return lease
