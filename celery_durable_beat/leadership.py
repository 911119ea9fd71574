"""Who leads (SPEC §7): acquire, renew, lose and fence; how long a standby waits.

Leadership is decided in the round itself, never in a signal handler or ``beat_init`` (whose
exceptions Celery swallows: RedBeat #208/#238). Every round starts with ``Leadership.acquire``:
a standby tries to take the lease, a leader renews it once ``RENEW_AFTER`` of the TTL has
passed (and before any round that dispatches). A leader trusts a renewal for ``LEASE_SAFETY`` of
the TTL on the monotonic clock, counted from before the renewal was sent, and checks that
(``still_leader``)
before the round and between schedules, so it stops publishing before its lease could have
expired. Losing the lease, failing to renew it in time or being fenced out by the store
(``StaleEpoch``) is logged once as ``leadership lost`` and the beat carries on as a standby
(RedBeat's standby exited: #218/#306). Standbys try every ``min(poll_interval, ttl / 3)`` seconds,
and right after the expiry when a lease runs out unrenewed.

A new epoch is registered in the store before this beat writes anything with it, so the store can
refuse every older leader's writes. Nothing here knows Celery: the lease, the store's fence and a
clock are all it needs, which is what lets unit tests drive it with fakes and a manual clock.
"""

from __future__ import annotations

import logging
from typing import Protocol

from celery_durable_beat.clock import Clock
from celery_durable_beat.exceptions import LeaseError, StoreError
from celery_durable_beat.lease.base import LEASE_SAFETY, Lease, LeaseStatus
from celery_durable_beat.logs import log_extra
from celery_durable_beat.model import Action

# One logger for the whole beat process (scheduler, leadership, loop), as before the split.
log = logging.getLogger("celery_durable_beat.scheduler")

EXPIRY_MARGIN_S = 0.02
"""How long after the lease's expiry (by the backend's clock) a standby tries to take it."""

RENEW_AFTER = 1 / 3
"""Share of the TTL after which an idle leader renews: before that, its last renewal is fresh
and an idle round is one store probe (issue #16). Safe because a renewal is trusted for
``LEASE_SAFETY`` (0.8) of the TTL and rounds come at least every third of it, so an idle leader
renews by two thirds of the TTL; a round with something due renews first whatever its age."""


class EpochFence(Protocol):
    """What leadership needs of the store (``RoundStore.register_epoch``)."""

    def register_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the newest the store accepts writes from."""


class Leadership:
    """This beat's standing in the election, updated once per round by ``acquire``.

    ``was_leader`` is ``None`` until the first answer, so the first "standing by" is logged even
    when nobody leads; afterwards gained, lost and standing by are each logged once per change.
    """

    def __init__(
        self, lease: Lease, store: EpochFence, clock: Clock, *, poll_interval: float
    ) -> None:
        self.lease = lease
        self.store = store
        self.clock = clock
        self.poll_interval = poll_interval
        self.epoch = 0
        self.was_leader: bool | None = None
        self.status: LeaseStatus | None = None
        self._valid_until = 0.0
        self._renewed_at = 0.0
        self._seen_holder: str | None = None

    @property
    def ttl_seconds(self) -> float:
        return self.lease.ttl_seconds

    def acquire(self, *, fresh_for: float = RENEW_AFTER) -> bool:
        """Renew or acquire the lease (raises ``LeaseError``); whether this beat leads now.

        A leader whose last renewal is younger than ``fresh_for`` of the TTL keeps it without a
        call (``fresh_for=0``: renew now). A gained or changed epoch is registered in the store
        (which may raise ``StoreError``) before this returns True, so nothing is ever written
        under an epoch the store has not seen.
        """
        started = self.clock.monotonic()
        ttl = self.lease.ttl_seconds
        if self.still_leader() and started - self._renewed_at < ttl * fresh_for:
            return True
        status = self.status = self.lease.acquire_or_renew()
        if not status.leader:
            self._note_standby(status)
            return False
        self._renewed_at = started
        self._valid_until = started + ttl * LEASE_SAFETY
        if status.epoch != self.epoch or not self.was_leader:
            self._gain(status)
        return True

    def still_leader(self) -> bool:
        """Whether the last renewal still covers a write now (the monotonic clock decides)."""
        return bool(self.was_leader) and self.clock.monotonic() < self._valid_until

    def keep_leading(self) -> bool:
        """Inside a round: renew once ``RENEW_AFTER`` of the TTL has passed; whether this beat
        still leads under the epoch it had.

        A round that outlasts its lease (a burst into a slow or restarting broker) is fenced at
        its audit, and the next leader publishes the same burst again, into the same slow
        broker: two beats can hand that round back and forth without end (found by the
        ``rabbitmq_restart`` chaos scenario, 5,000 ticks on a 2 s TTL). Renewing as the round
        goes keeps a live leader's lease (SPEC §7: long leader work between renewals). A
        failed renewal leaves the last one's safety window to decide; a store that cannot
        register a new epoch stops the round.
        """
        if not self.was_leader:
            return False
        epoch = self.epoch
        try:
            renewed = self.acquire()
        except LeaseError:
            return self.still_leader()
        except StoreError:
            return False
        return renewed and self.epoch == epoch and self.still_leader()

    def _gain(self, status: LeaseStatus) -> None:
        self.store.register_epoch(status.epoch)
        self.epoch = status.epoch
        self.was_leader = True
        self._seen_holder = status.holder
        log.info(
            "leadership gained (epoch %d) by %s",
            status.epoch,
            status.holder,
            extra=log_extra(Action.LEADERSHIP_GAINED, epoch=status.epoch),
        )

    def _note_standby(self, status: LeaseStatus) -> None:
        who = status.holder or "no beat"
        if self.was_leader:
            self.lose(f"{who} holds the lease now (epoch {status.epoch})")
        elif self.was_leader is None or (status.holder and status.holder != self._seen_holder):
            log.info(
                "standing by: %s leads (epoch %d)",
                who,
                status.epoch,
                extra=log_extra(Action.STANDBY, leader=status.holder),
            )
        if status.holder:
            self._seen_holder = status.holder
        self.was_leader = False
        self._valid_until = 0.0

    def lose(self, why: str) -> None:
        """Stop dispatching; say so once. The beat stays up as a standby."""
        if self.was_leader:
            log.warning(
                "leadership lost (epoch %d): %s; standing by",
                self.epoch,
                why,
                extra=log_extra(Action.LEADERSHIP_LOST, epoch=self.epoch),
            )
        self.was_leader = False
        self._valid_until = 0.0

    def lose_if_lapsed(self) -> None:
        """After a failed round: a leader whose renewal no longer covers a write has lost."""
        if self.was_leader and not self.still_leader():
            self.lose("the lease could not be renewed before it could expire")

    def fenced(self) -> None:
        """The store has seen a newer epoch: whatever lease this beat holds is worthless.

        Releasing it (only if still held: by token) lets the next acquisition take a fresh epoch
        above the store's, instead of a beat renewing a lease whose every write is refused.
        """
        self.lose("a newer leader fenced this beat out (the store refused its epoch)")
        try:
            self.lease.release()
        except LeaseError as exc:
            log.debug(
                "release after fencing failed: %s",
                exc,
                extra=log_extra(Action.LEASE_RELEASE_FAILED),
            )

    def max_sleep(self) -> float:
        """Longest wait between rounds: the poll interval, and a third of the TTL so a leader
        renews in time and a standby notices an expiry soon after it happens."""
        return min(self.poll_interval, self.lease.ttl_seconds / 3)

    def standby_delay(self) -> float:
        """Until the next try: the usual wait, or less when the lease runs out sooner (a leader
        that stopped renewing), so the first try after the expiry comes right after it."""
        status, wait = self.status, self.max_sleep()
        if status is None or status.leader or status.remaining_ms is None:
            return wait
        return min(wait, status.remaining_ms / 1000 + EXPIRY_MARGIN_S)

    def close(self) -> None:
        """Release the lease (only if this beat holds it), so a standby need not wait the TTL.

        A beat that never led asks nothing of the lease: it has nothing to release, and the
        backend may not even have the lease's columns yet (a beat refusing an outdated schema
        must say so, not fail on the release's query)."""
        if not self.was_leader:
            self.lease.close()
            return
        try:
            self.lease.release()
        except LeaseError as exc:
            log.warning(
                "lease release failed (%s); it expires by itself",
                exc,
                extra=log_extra(Action.LEASE_RELEASE_FAILED),
            )
        else:
            if self.was_leader:
                log.info(
                    "leadership released (epoch %d): shutting down",
                    self.epoch,
                    extra=log_extra(Action.LEADERSHIP_LOST, epoch=self.epoch),
                )
        self.lease.close()
