"""The store lease (the default): the fence row of the SQL store as the leader lease.

The statements and their compare-and-set rules live in ``lease/sql_rows.py``; this module keeps
the ``Lease`` contract (``lease/base.py``) on top of them. Because the lease row *is* the fence
row, each acquisition raises the store's fencing epoch in the same UPDATE: there is no window in
which a new leader holds the lease but the store still accepts the old leader's writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from celery_durable_beat.exceptions import LeaseError, StoreError
from celery_durable_beat.lease.base import LeaseStatus, default_holder, new_token

if TYPE_CHECKING:
    from celery_durable_beat.lease.base import Lease
    from celery_durable_beat.lease.sql_rows import LeaseRow


@runtime_checkable
class LeaseRows(Protocol):
    """What the store lease needs of a store (``SqlStore`` has it)."""

    def lease_acquire_or_renew(
        self, token: str, holder: str, ttl_ms: int, epoch: int | None = None
    ) -> LeaseRow:
        """One acquire-or-renew transaction on the fence row."""

    def lease_release(self, token: str) -> bool:
        """Clear the holder if ``token`` holds the lease."""


class StoreLease:
    """Leadership through the store's fence row; expiry by the database's clock."""

    def __init__(
        self,
        store: LeaseRows,
        ttl_seconds: float = 30.0,
        *,
        holder: str | None = None,
        token: str | None = None,
    ) -> None:
        self.store = store
        self.ttl_seconds = ttl_seconds
        self.holder = holder or default_holder()
        self.token = token or new_token()
        self._ttl_ms = max(1, round(ttl_seconds * 1000))
        self._epoch: int | None = None  # the epoch this lease acquired, while it leads

    def __repr__(self) -> str:
        return f"StoreLease(holder={self.holder!r}, ttl={self.ttl_seconds:g}s)"

    def acquire_or_renew(self) -> LeaseStatus:
        try:
            row = self.store.lease_acquire_or_renew(
                self.token, self.holder, self._ttl_ms, self._epoch
            )
        except StoreError as exc:
            raise LeaseError(f"the store lease could not be renewed or acquired: {exc}") from exc
        if row.leader:
            # Kept after a refusal too: a row with this token at another epoch is never adopted.
            self._epoch = row.epoch
        return LeaseStatus(
            leader=row.leader,
            epoch=row.epoch,
            holder=row.holder,
            expires_at_ms=row.expires_at_ms,
            remaining_ms=row.remaining_ms,
        )

    def release(self) -> None:
        self._epoch = None
        try:
            self.store.lease_release(self.token)
        except StoreError as exc:
            raise LeaseError(f"the store lease could not be released: {exc}") from exc

    def close(self) -> None:
        """The store owns the connections; the scheduler closes it."""


if TYPE_CHECKING:

    def _conforms(lease: StoreLease) -> Lease:
        """mypy proves here that StoreLease keeps the Lease protocol."""
        return lease
