"""``celery -A proj beat -S celery_durable_beat.Scheduler``: a thin adapter onto the round.

Celery's own behaviour shapes this class (seen with Celery 5.7):

* ``celery beat`` builds a throwaway instance with ``lazy=True`` just to print its banner, so the
  constructor touches neither the store nor the lease; everything starts in ``setup_schedule``.
* ``close()`` runs twice on shutdown (signal handler, then the service's ``finally``), so it is
  idempotent.
* ``tick()`` is called in bursts just before a due instant, so it answers from a monotonic
  wake-up time without a store query until something can be due.
* SIGTERM/SIGINT raise ``SystemExit`` wherever the main thread is. A round in flight would be cut
  between publish and audit; the handler installed here defers the exit to the end of the round.
  ``close()`` then releases the lease, so a standby takes over on its next round.

Leadership (SPEC §7) is decided in the round itself, never in a signal handler or ``beat_init``
(whose exceptions Celery swallows: RedBeat #208/#238). Every round starts with one
acquire-or-renew. A leader trusts a renewal for ``LEASE_SAFETY`` of the TTL on the monotonic clock,
counted from before the renewal was sent, and checks that before the round and between schedules,
so it stops publishing before its lease could have expired. Losing the lease, failing to renew it
in time or being fenced out by the store (``StaleEpoch``) is logged once as ``leadership lost`` and
the beat carries on as a standby (RedBeat's standby exited: #218/#306). Standbys try every
``min(poll_interval, ttl / 3)`` seconds, and right after the expiry when a lease runs out
unrenewed; store, Redis and broker outages back off and never exit.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from celery import beat
from kombu.exceptions import OperationalError as KombuOperationalError

from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.clock import Clock, SystemClock
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import (
    ConfigError,
    LeaseError,
    SchemaOutdated,
    StaleEpoch,
    StoreError,
    StoreUnavailable,
)
from celery_durable_beat.lease.base import LEASE_SAFETY, Lease, LeaseStatus
from celery_durable_beat.model import Action
from celery_durable_beat.publish import CeleryPublisher
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import Store
from celery_durable_beat.sync import sync_definitions
from celery_durable_beat.urls import redact_url
from celery_durable_beat.wiring import make_gate, make_lease, make_store

log = logging.getLogger("celery_durable_beat.scheduler")

PRUNE_EVERY_MS = 60_000
BACKOFF_MAX_S = 30.0
EXPIRY_MARGIN_S = 0.02
"""How long after the lease's expiry (by the backend's clock) a standby tries to take it."""
BROKER_ERRORS: tuple[type[Exception], ...] = (
    KombuOperationalError,
    ConnectionError,
    OSError,
    TimeoutError,
)
"""Failures that escape the publisher (e.g. taking a broker connection): a broker outage."""


class Scheduler(beat.Scheduler):  # type: ignore[misc]
    """The durable scheduler Celery beat drives."""

    def __init__(self, app: Any, *args: Any, clock: Clock | None = None, **kwargs: Any) -> None:
        self.settings = Settings.from_conf(app.conf)
        self.clock: Clock = clock or SystemClock()
        self.store: Store | None = None
        self.lease: Lease | None = None
        self.dispatcher: Dispatcher | None = None
        self._closed = False
        self._wake_at = 0.0
        self._lease_valid_until = 0.0
        self._was_leader: bool | None = None
        self._seen_holder: str | None = None
        self._epoch = 0
        self._synced_epoch: int | None = None
        self._schema_ready = False
        self._broker_down = False
        self._status: LeaseStatus | None = None
        self._failures = 0
        self._in_round = False
        self._stop_requested = False
        self._touched: set[str] = set()
        self._last_prune_ms = 0
        kwargs.setdefault("max_interval", self.settings.poll_interval)
        super().__init__(app, *args, **kwargs)
        self.max_interval = self.settings.poll_interval

    # -- Celery's hooks -------------------------------------------------------------------------
    def setup_schedule(self) -> None:
        try:
            self._definitions = (
                definitions_from_app(self.app, self.settings) if self.settings.sync_config else []
            )
        except ConfigError as exc:
            log.critical("beat refuses to start: %s", exc)
            raise
        self.store = make_store(self.settings)
        self._schema_ready = self._prepare_schema()
        self.lease = make_lease(self.settings, self.store)
        self.dispatcher = Dispatcher(
            self.store,
            CeleryPublisher(self.app),
            batch_size=self.settings.batch_size,
            quarantine_after=self.settings.quarantine_after,
            gate=make_gate(self.app, self.settings, self.store),
            still_leader=self._still_leader,
        )
        self._install_signal_handlers()
        log.info(
            "durable beat ready: store %s, lease %s, as %s",
            redact_url(self.store.url),
            redact_url(self.settings.lease_url) if self.settings.lease_url else "in the store",
            getattr(self.lease, "holder", "sole"),
        )

    def _prepare_schema(self) -> bool:
        """Create the schema now if the store answers; an outage at start is retried by rounds."""
        assert self.store is not None
        try:
            self.store.ensure_schema()
        except StoreUnavailable as exc:
            log.warning(
                "store unavailable at start (%s); beat keeps trying",
                exc,
                extra={"action": Action.STORE_UNAVAILABLE.value},
            )
            return False
        return True

    def tick(self, *args: Any, **kwargs: Any) -> float:
        now = self.clock.monotonic()
        if now < self._wake_at:
            return self._wake_at - now
        self._in_round = True
        try:
            delay = self._round()
        finally:
            self._in_round = False
        if self._stop_requested:
            raise SystemExit(0)
        self._wake_at = self.clock.monotonic() + delay
        return delay

    def sync(self) -> None:
        """Nothing to flush: every round persisted its own work."""

    def should_sync(self) -> bool:
        return False

    def close(self) -> None:
        """Release the lease (only if this beat holds it) so a standby need not wait the TTL."""
        if self._closed:
            return
        self._closed = True
        if self.lease is not None:
            try:
                self.lease.release()
            except LeaseError as exc:
                log.warning("lease release failed (%s); it expires by itself", exc)
            else:
                if self._was_leader:
                    log.info(
                        "leadership released (epoch %d): shutting down",
                        self._epoch,
                        extra={"action": Action.LEADERSHIP_LOST.value, "epoch": self._epoch},
                    )
            self.lease.close()
        gate = self.dispatcher.gate if self.dispatcher is not None else None
        if gate is not None and hasattr(gate, "close"):
            gate.close()
        if self.store is not None:
            self.store.close()
        super().close()

    @property
    def info(self) -> str:
        lease = redact_url(self.settings.lease_url) if self.settings.lease_url else "store"
        return (
            f"    . store -> {redact_url(self.settings.url)}\n"
            f"    . lease -> {lease} (ttl {self.settings.lease_ttl:g}s)"
        )

    # -- the round ----------------------------------------------------------------------------
    def _round(self) -> float:
        """One round; never raises for an outage (SPEC §7: beat logs, backs off, resumes)."""
        try:
            self._ensure_schema()
            if not self._lead():
                return self._standby_delay()
            return self._dispatch()
        except StaleEpoch:
            self._fenced()
            return self._standby_delay()
        except SchemaOutdated as exc:
            log.critical("beat refuses to run: %s", exc)
            raise
        except (StoreError, LeaseError) as exc:
            return self._backoff(exc)
        except BROKER_ERRORS as exc:
            self._broker_down = True
            return self._backoff(exc, f"broker unavailable: {type(exc).__name__}")
        except Exception as exc:
            log.exception("round failed unexpectedly")
            return self._backoff(exc)

    def _ensure_schema(self) -> None:
        if not self._schema_ready:
            assert self.store is not None
            self.store.ensure_schema()
            self._schema_ready = True

    def _dispatch(self) -> float:
        """Claim only when something is due: an idle round is one index probe."""
        assert self.store is not None and self.dispatcher is not None
        now_ms, due = self.store.clock_and_earliest_due()
        if due is None or due > now_ms:
            if not self._broker_down:  # idle rounds between broker retries keep the backoff
                self._failures = 0
            return self._delay(due, now_ms)
        stats = self.dispatcher.run_round(now_ms, self._epoch)
        self._touched.update(e.schedule for e in stats.events)
        self._broker_down = stats.broker_unavailable
        if stats.broker_unavailable:
            return self._backoff(None, "broker unavailable: the ticks stay due")
        self._failures = 0
        if not self._still_leader():
            return 0.0  # stopped early for the lease: renew (or learn who leads) right away
        self._maybe_prune(now_ms)
        if stats.claimed >= self.dispatcher.batch_size:
            return 0.0
        now_ms, due = self.store.clock_and_earliest_due()
        return self._delay(due, now_ms)

    # -- leadership ---------------------------------------------------------------------------
    def _lead(self) -> bool:
        """Renew or acquire the lease; gain, config-sync and report whether to dispatch now."""
        assert self.lease is not None and self.store is not None
        started = self.clock.monotonic()
        status = self._status = self.lease.acquire_or_renew()
        if not status.leader:
            self._note_standby(status)
            return False
        self._lease_valid_until = started + self.lease.ttl_seconds * LEASE_SAFETY
        if status.epoch != self._epoch or not self._was_leader:
            self._gain(status)
        if self.settings.sync_config and self._synced_epoch != self._epoch:
            sync_definitions(self.store, self._definitions, self.store.now_ms())
            self._synced_epoch = self._epoch
        return self._still_leader()

    def _still_leader(self) -> bool:
        """Whether the last renewal still covers a write now (the monotonic clock decides)."""
        return bool(self._was_leader) and self.clock.monotonic() < self._lease_valid_until

    def _gain(self, status: LeaseStatus) -> None:
        """A new epoch: the store must know it before this beat writes anything with it."""
        assert self.store is not None
        self.store.register_epoch(status.epoch)
        self._epoch = status.epoch
        self._was_leader = True
        self._seen_holder = status.holder
        log.info(
            "leadership gained (epoch %d) by %s",
            status.epoch,
            status.holder,
            extra={"action": Action.LEADERSHIP_GAINED.value, "epoch": status.epoch},
        )

    def _note_standby(self, status: LeaseStatus) -> None:
        who = status.holder or "no beat"
        if self._was_leader:
            self._lost(f"{who} holds the lease now (epoch {status.epoch})")
        elif self._was_leader is None or (status.holder and status.holder != self._seen_holder):
            log.info(
                "standing by: %s leads (epoch %d)",
                who,
                status.epoch,
                extra={"action": Action.STANDBY.value, "leader": status.holder},
            )
        if status.holder:
            self._seen_holder = status.holder
        self._was_leader = False
        self._lease_valid_until = 0.0

    def _lost(self, why: str) -> None:
        """Stop dispatching; say so once. The beat stays up as a standby."""
        if self._was_leader:
            log.warning(
                "leadership lost (epoch %d): %s; standing by",
                self._epoch,
                why,
                extra={"action": Action.LEADERSHIP_LOST.value, "epoch": self._epoch},
            )
        self._was_leader = False
        self._lease_valid_until = 0.0

    def _fenced(self) -> None:
        """The store has seen a newer epoch: whatever lease this beat holds is worthless.

        Releasing it (only if still held: by token) lets the next acquisition take a fresh epoch
        above the store's, instead of a beat renewing a lease whose every write is refused.
        """
        self._lost("a newer leader fenced this beat out (the store refused its epoch)")
        assert self.lease is not None
        try:
            self.lease.release()
        except LeaseError as exc:
            log.debug("release after fencing failed: %s", exc)

    def _max_sleep(self) -> float:
        """Longest wait between rounds: the poll interval, and a third of the TTL so a leader
        renews in time and a standby notices an expiry soon after it happens."""
        ttl = self.lease.ttl_seconds if self.lease else self.settings.lease_ttl
        return min(self.settings.poll_interval, ttl / 3)

    def _standby_delay(self) -> float:
        """Until the next try: the usual wait, or less when the lease runs out sooner (a leader
        that stopped renewing), so the first try after the expiry comes right after it."""
        status, wait = self._status, self._max_sleep()
        if status is None or status.leader or status.remaining_ms is None:
            return wait
        return min(wait, status.remaining_ms / 1000 + EXPIRY_MARGIN_S)

    def _delay(self, due_ms: int | None, now_ms: int) -> float:
        if due_ms is None:
            return self._max_sleep()
        return max(0.0, min((due_ms - now_ms) / 1000, self._max_sleep()))

    def _backoff(self, exc: Exception | None, what: str | None = None) -> float:
        """Wait longer after each failed round (capped at a third of the TTL); say why, once a
        round: the store's and the lease's messages name their URL without its password."""
        self._failures += 1
        if self._was_leader and not self._still_leader():
            self._lost("the lease could not be renewed before it could expire")
        delay = self._backoff_delay()
        known = isinstance(exc, (StoreError, LeaseError))
        log.warning(
            "round failed (%s); retrying in %.1fs",
            what or (str(exc) if known else type(exc).__name__),
            delay,
            extra={"action": Action.STORE_UNAVAILABLE.value},
        )
        return delay

    def _backoff_delay(self) -> float:
        ttl = self.lease.ttl_seconds if self.lease else self.settings.lease_ttl
        cap = min(BACKOFF_MAX_S, ttl / 3)
        return float(min(cap, 0.5 * 2 ** min(self._failures - 1, 10)))

    def _maybe_prune(self, now_ms: int) -> None:
        if not self._touched or now_ms - self._last_prune_ms < PRUNE_EVERY_MS:
            return
        assert self.store is not None
        self.store.prune_history(sorted(self._touched), self.settings.history_keep)
        self._touched.clear()
        self._last_prune_ms = now_ms

    # -- shutdown -------------------------------------------------------------------------------
    def _install_signal_handlers(self) -> None:
        """Finish the round in flight before exiting on SIGTERM/SIGINT (main thread only)."""

        def handler(signum: int, frame: Any) -> None:
            # No lease work here: Celery swallows what a handler raises. close() releases.
            if self._in_round or self._closed:
                self._stop_requested = True
                return
            raise SystemExit(0)

        try:
            signal.signal(signal.SIGTERM, handler)
            signal.signal(signal.SIGINT, handler)
        except ValueError:  # not the main thread (embedded beat): Celery's handlers stay
            log.debug("signal handlers left to Celery (not the main thread)")
