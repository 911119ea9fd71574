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
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from celery import beat
from sqlalchemy.engine import make_url

from celery_durable_beat.clock import Clock, SystemClock
from celery_durable_beat.config import definitions_from_app
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import ConfigError, LeaseError, StaleEpoch, StoreError
from celery_durable_beat.lease.base import Lease, LeaseStatus
from celery_durable_beat.model import Action
from celery_durable_beat.publish import CeleryPublisher
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import Store
from celery_durable_beat.sync import sync_definitions
from celery_durable_beat.wiring import make_gate, make_lease, make_store

log = logging.getLogger("celery_durable_beat.scheduler")

PRUNE_EVERY_MS = 60_000
BACKOFF_MAX_S = 30.0


def safe_url(url: str) -> str:
    """The URL with its password hidden, for logs and banners."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable url>"


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
        self._epoch = 0
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
        self.store.ensure_schema()
        self.lease = make_lease(self.settings, self.store)
        self.dispatcher = Dispatcher(
            self.store,
            CeleryPublisher(self.app),
            batch_size=self.settings.batch_size,
            quarantine_after=self.settings.quarantine_after,
            gate=make_gate(self.app, self.settings, self.store),
        )
        self._install_signal_handlers()
        log.info("durable beat ready: store %s", safe_url(self.store.url))

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
        if self._closed:
            return
        self._closed = True
        if self.lease is not None:
            try:
                self.lease.release()
            except LeaseError as exc:
                log.warning("lease release failed (%s); it expires by itself", type(exc).__name__)
            self.lease.close()
        if self.store is not None:
            self.store.close()
        super().close()

    @property
    def info(self) -> str:
        lease = safe_url(self.settings.lease_url) if self.settings.lease_url else "store"
        return (
            f"    . store -> {safe_url(self.settings.url)}\n"
            f"    . lease -> {lease} (ttl {self.settings.lease_ttl:g}s)"
        )

    # -- the round ----------------------------------------------------------------------------
    def _round(self) -> float:
        """One round; never raises for an outage (SPEC §7: beat logs, backs off, resumes)."""
        try:
            if not self._lead():
                return self._standby_delay()
            return self._dispatch()
        except StaleEpoch:
            self._lost("a newer leader fenced this beat out")
            return self._standby_delay()
        except (StoreError, LeaseError) as exc:
            return self._backoff(exc)
        except Exception as exc:
            log.exception("round failed unexpectedly")
            return self._backoff(exc)

    def _dispatch(self) -> float:
        """Claim only when something is due: an idle round is two cheap index reads."""
        assert self.store is not None and self.dispatcher is not None
        now_ms = self.store.now_ms()
        due = self.store.earliest_due_ms()
        if due is None or due > now_ms:
            self._failures = 0
            return self._delay(due, now_ms)
        stats = self.dispatcher.run_round(now_ms, self._epoch)
        if stats.broker_unavailable:
            self._failures += 1
            return self._backoff_delay()
        self._failures = 0
        self._touched.update(e.schedule for e in stats.events)
        self._maybe_prune(now_ms)
        if stats.claimed >= self.dispatcher.batch_size:
            return 0.0
        return self._delay(self.store.earliest_due_ms(), self.store.now_ms())

    def _lead(self) -> bool:
        assert self.lease is not None and self.store is not None
        started = self.clock.monotonic()
        status = self.lease.acquire_or_renew()
        if not status.leader:
            self._note_standby(status)
            return False
        if status.epoch != self._epoch or not self._was_leader:
            self._gain(status)
        self._lease_valid_until = started + self.lease.ttl_seconds * 0.8
        return self.clock.monotonic() < self._lease_valid_until

    def _gain(self, status: LeaseStatus) -> None:
        assert self.store is not None
        self.store.register_epoch(status.epoch)
        self._epoch = status.epoch
        self._was_leader = True
        log.info(
            "leadership gained (epoch %d)",
            status.epoch,
            extra={"action": Action.LEADERSHIP_GAINED.value, "epoch": status.epoch},
        )
        if self.settings.sync_config:
            sync_definitions(self.store, self._definitions, self.store.now_ms())

    def _note_standby(self, status: LeaseStatus) -> None:
        if self._was_leader:
            self._lost(f"held by {status.holder}")
        elif self._was_leader is None:
            log.info(
                "standing by: %s leads (epoch %d)",
                status.holder,
                status.epoch,
                extra={"action": Action.STANDBY.value, "leader": status.holder},
            )
        self._was_leader = False

    def _lost(self, why: str) -> None:
        if self._was_leader:
            log.warning("leadership lost: %s", why, extra={"action": Action.LEADERSHIP_LOST.value})
        self._was_leader = False
        self._lease_valid_until = 0.0

    def _standby_delay(self) -> float:
        ttl = self.lease.ttl_seconds if self.lease else self.settings.lease_ttl
        return min(self.settings.poll_interval, ttl / 3)

    def _delay(self, due_ms: int | None, now_ms: int) -> float:
        if due_ms is None:
            return self.settings.poll_interval
        return max(0.0, min((due_ms - now_ms) / 1000, self.settings.poll_interval))

    def _backoff(self, exc: Exception) -> float:
        self._failures += 1
        delay = self._backoff_delay()
        log.warning(
            "round failed (%s); retrying in %.1fs",
            type(exc).__name__,
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
            if self._in_round:
                self._stop_requested = True
                return
            raise SystemExit(0)

        try:
            signal.signal(signal.SIGTERM, handler)
            signal.signal(signal.SIGINT, handler)
        except ValueError:  # not the main thread (embedded beat): Celery's handlers stay
            log.debug("signal handlers left to Celery (not the main thread)")
