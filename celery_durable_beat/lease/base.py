"""The leader lease contract (SPEC §7).

Rules every backend keeps:

1. ``acquire_or_renew()`` is called once per round by the beat that wants to lead. It renews the
   lease only if this beat (its token) holds it, and acquires it only if it is free or expired,
   judged by the backend's clock (Redis's or the database's), never the host's.
2. Every acquisition by a new holder increments the fencing epoch, which the store then enforces
   on every audit write and advance (``Store.register_epoch``).
3. ``release()`` gives the lease up only if this beat holds it, so a successor can take over on
   its next round instead of waiting out the TTL. Idempotent.
4. A backend failure raises ``LeaseError``; "someone else leads" is a normal answer, not an error.
5. Optional, for a backend that keeps the holder outside the store (Redis): ``holder_info()``
   (``HolderInfo``) reads who holds the lease and until when, by the backend's clock, without
   acquiring, renewing or touching the epoch; a free or expired lease has ``holder`` None. The
   store lease needs none: its holder is the store's fence row (``Store.leader_info``).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import Protocol

from celery_durable_beat.exceptions import LeaseError, StoreError

LEASE_SAFETY = 0.8
"""Share of the TTL a leader trusts a renewal for, counted on its monotonic clock from *before*
the renewal was sent: the backend sets the expiry after that instant, so the leader stops
dispatching at least ``(1 - LEASE_SAFETY) * ttl`` before any standby can take over, which absorbs
clock-rate differences between hosts and the time from the last check to the last write."""


def default_holder() -> str:
    """How a beat names itself to the others: ``hostname:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def new_token() -> str:
    """A secret per lease object: only its owner can renew or release what it acquired."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class LeaseStatus:
    """The answer of one acquire-or-renew."""

    leader: bool
    epoch: int
    holder: str | None
    expires_at_ms: int | None
    remaining_ms: int | None = None
    """How long the lease has left by the backend's clock when it answered (None: unknown). A
    standby whose leader stopped renewing sleeps just that long, to try right after the expiry."""


class Lease(Protocol):
    ttl_seconds: float

    def acquire_or_renew(self) -> LeaseStatus:
        """Lead or learn who leads (rule 1)."""

    def release(self) -> None:
        """Give the lease up if held (rule 3)."""

    def close(self) -> None:
        """Release connections; idempotent."""


class HolderInfo(Protocol):
    """Rule 5: a read-only look at the lease, for ``status`` (SPEC §8)."""

    def holder_info(self) -> LeaseStatus:
        """Who holds the lease, at which epoch, until when; ``leader`` is whether this object's
        own token holds it (a reader that never acquired: always False)."""

    def close(self) -> None:
        """Release connections; idempotent."""


class SoleLease:
    """Always the leader at a fixed epoch: one beat, no election (FrozenBeat, tests)."""

    def __init__(self, epoch: int = 1, ttl_seconds: float = 30.0) -> None:
        self.epoch = epoch
        self.ttl_seconds = ttl_seconds

    def acquire_or_renew(self) -> LeaseStatus:
        return LeaseStatus(leader=True, epoch=self.epoch, holder="sole", expires_at_ms=None)

    def release(self) -> None:
        """Nothing is held elsewhere."""

    def close(self) -> None:
        """Nothing to close."""


# -- a lease on a store's fence row (the SQL store's and the memory store's) ----------------------


@dataclass(frozen=True)
class LeaseRow:
    """The fence row after one acquire-or-renew: who holds the lease, at which epoch, until when.

    ``leader`` says whether the caller's token holds it; ``acquired`` whether this call took it
    (a new epoch) rather than renewing it; ``remaining_ms`` how long it has left by the
    database's clock.
    """

    leader: bool
    acquired: bool
    epoch: int
    holder: str | None
    expires_at_ms: int | None
    remaining_ms: int | None


class FenceRows(Protocol):
    """The fence row's compare-and-set rules, as a store keeps them (``lease/sql.py`` states them
    for SQL; ``store/memory.py`` keeps the same ones under its lock)."""

    def acquire_or_renew(self, token: str, holder: str, ttl_ms: int, epoch: int | None) -> LeaseRow:
        """Renew if ``token`` holds the lease at ``epoch``, else take it if free or expired."""

    def release(self, token: str) -> bool:
        """Clear the holder if ``token`` holds the lease (the epoch stays)."""


class FenceLease:
    """The ``Lease`` contract on a store's fence row: because the lease row *is* the fence row,
    each acquisition raises the store's fencing epoch in the same write, so no new leader ever
    holds the lease while the store still accepts the old leader's writes."""

    def __init__(
        self,
        rows: FenceRows,
        ttl_seconds: float = 30.0,
        *,
        holder: str | None = None,
        token: str | None = None,
    ) -> None:
        self.rows = rows
        self.ttl_seconds = ttl_seconds
        self.holder = holder or default_holder()
        self.token = token or new_token()
        self._ttl_ms = max(1, round(ttl_seconds * 1000))
        self._epoch: int | None = None  # the epoch this lease acquired, while it leads

    def acquire_or_renew(self) -> LeaseStatus:
        try:
            row = self.rows.acquire_or_renew(self.token, self.holder, self._ttl_ms, self._epoch)
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
            self.rows.release(self.token)
        except StoreError as exc:
            raise LeaseError(f"the store lease could not be released: {exc}") from exc

    def close(self) -> None:
        """The store owns the connections; whoever built it closes it."""
