"""``MemoryLease``: the store lease (``lease/sql.py``) on a ``MemoryStore``'s fence row.

The fence row of a ``MemoryStore`` keeps the rules of the SQL one (``lease/sql.py``) under
the store's lock: an expiring lease judged by the store's (injectable) clock, a new epoch for
every acquisition, renewal and release only by the token that acquired it. Several
``MemoryLease`` objects on one store therefore behave like several beats on one database: one
leads, the others stand by and take over once the lease expires or is released. Tests use it to
exercise leadership (failover, fencing, the standby's delay) without a database or Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from celery_durable_beat.lease.base import FenceLease, LeaseRow

if TYPE_CHECKING:
    from celery_durable_beat.lease.base import Lease
    from celery_durable_beat.store.memory import MemoryStore


class _MemoryFence:
    """The ``FenceRows`` of a ``MemoryStore``: its fence row, under its lock."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def acquire_or_renew(self, token: str, holder: str, ttl_ms: int, epoch: int | None) -> LeaseRow:
        return self.store.lease_acquire_or_renew(token, holder, ttl_ms, epoch)

    def release(self, token: str) -> bool:
        return self.store.lease_release(token)


class MemoryLease(FenceLease):
    """Leadership through a ``MemoryStore``'s fence; expiry by that store's clock."""

    def __init__(
        self,
        store: MemoryStore,
        ttl_seconds: float = 30.0,
        *,
        holder: str | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(_MemoryFence(store), ttl_seconds, holder=holder, token=token)
        self.store = store

    def __repr__(self) -> str:
        return f"MemoryLease(holder={self.holder!r}, ttl={self.ttl_seconds:g}s)"


if TYPE_CHECKING:

    def _conforms(lease: MemoryLease) -> Lease:
        """mypy proves here that MemoryLease keeps the Lease protocol."""
        return lease
