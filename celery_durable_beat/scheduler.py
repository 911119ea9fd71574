"""``celery -A proj beat -S celery_durable_beat.Scheduler``: a thin adapter onto the round.

The rounds live in ``beat_loop.py`` and the election in ``leadership.py``; this class wires them
from settings and answers Celery's hooks. Celery's own behaviour shapes it (seen with Celery 5.7):

* ``celery beat`` builds a throwaway instance with ``lazy=True`` just to print its banner, so the
  constructor touches neither the store nor the lease; everything starts in ``setup_schedule``.
* ``close()`` runs twice on shutdown (signal handler, then the service's ``finally``), so it is
  idempotent.
* ``tick()`` is called in bursts just before a due instant, so it answers from a monotonic
  wake-up time without a store query until something can be due.
* Integrations that wrap stock beat's ``apply_entry`` (Sentry Crons, Datadog) are seen when the
  scheduler is built (the banner names them) and at start (one line each); every automatic tick
  then goes through ``self.apply_entry`` and ends in ``apply_async`` below, which publishes it
  on the round's session (``publish/through_beat.py``, SPEC §17).
* SIGTERM/SIGINT raise ``SystemExit`` wherever the main thread is. A round in flight would be cut
  between publish and audit; the handler installed here (for SIGHUP too, which would otherwise
  end the process with the lease held) defers the exit to the end of the round. ``close()`` then
  releases the lease, so a standby takes over on its next round.
"""

from __future__ import annotations

import logging
import signal
from typing import Any, NoReturn

from celery import beat

from celery_durable_beat.beat_loop import BeatLoop
from celery_durable_beat.celery_config import STOCK_SCHEDULE_FILE
from celery_durable_beat.clock import Clock, SystemClock
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import ConfigError, SchemaOutdated
from celery_durable_beat.lease.base import Lease
from celery_durable_beat.logs import log_extra
from celery_durable_beat.model import Action
from celery_durable_beat.publish.through_beat import routed_tick
from celery_durable_beat.publish.wrappers import beat_wrappers
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import BeatStore
from celery_durable_beat.urls import redact_url
from celery_durable_beat.wiring import make_beat_loop

log = logging.getLogger("celery_durable_beat.scheduler")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""What ends beat cleanly. SIGHUP too: its default action ends the process on the spot, with the
lease still held, so the next beat would wait out its TTL (a terminal closed, a unit reloaded)."""
EXIT_INVALID_CONFIG = 2
"""Beat's exit status on an invalid config: the status ``durable-beat check`` gives it too."""


def longest_sleep(requested: float | None, poll_interval: float) -> float:
    """The longest sleep between rounds: ``--max-interval`` (``beat_max_loop_interval``) when it
    is shorter than ``durable_beat_poll_interval``, else the poll interval (SPEC §14). Celery's
    banner shows this value, the one in force."""
    if requested is not None and 0 < requested < poll_interval:
        return requested  # as given: Celery's banner prints it like stock beat's
    return poll_interval


def _refuse(exc: ConfigError | SchemaOutdated, logged: bool = False) -> NoReturn:
    """Say what is wrong in one log line per problem, then exit with ``EXIT_INVALID_CONFIG``.

    Why ``SystemExit`` and not the exception: ``celery beat`` catches every ``Exception`` from
    its service and logs ``beat raised exception`` with the whole traceback after our message,
    burying it. ``SystemExit`` passes through Celery untouched; the exception stays reachable as
    its ``__cause__`` for callers that build a Scheduler themselves. ``logged``: a round said it
    already (an outdated schema found after start).
    """
    if not logged:
        problems = exc.problems if isinstance(exc, ConfigError) else ()
        text = str(problems[0]) if len(problems) == 1 else str(exc)
        log.critical("beat refuses to start: %s", text, extra=log_extra(Action.BEAT_REFUSED))
    raise SystemExit(EXIT_INVALID_CONFIG) from exc


class Scheduler(beat.Scheduler):  # type: ignore[misc]
    """The durable scheduler Celery beat drives."""

    def __init__(self, app: Any, *args: Any, clock: Clock | None = None, **kwargs: Any) -> None:
        self._refusal: ConfigError | None = None
        try:
            self.settings = Settings.from_conf(app.conf)
        except ConfigError as exc:  # the banner's lazy instance must not fail before logging
            self._refusal = exc  # is set up: setup_schedule refuses, with the defaults meanwhile
            self.settings = Settings.from_conf({}, environ={})
        self.clock: Clock = clock or SystemClock()
        self.store: BeatStore | None = None
        self.lease: Lease | None = None
        self.dispatcher: Dispatcher | None = None
        self.loop: BeatLoop | None = None
        self._closed = self._in_round = self._stop_requested = False
        self._wake_at = 0.0
        self._schedule_file = kwargs.get("schedule_filename")
        self.wrappers = beat_wrappers()
        """Which of stock beat's ``apply_entry`` / ``apply_async`` an integration wrapped, and
        with what; asked again at start, and by the publisher every round."""
        super().__init__(app, *args, **kwargs)
        self.max_interval = longest_sleep(kwargs.get("max_interval"), self.settings.poll_interval)

    def setup_schedule(self) -> None:
        try:
            if self._refusal is not None:
                raise self._refusal
            self.loop = loop = make_beat_loop(self.app, self.settings, self.clock, sender=self)
            loop.prepare()  # the metrics port is bound here: one taken is a refusal too
        except (ConfigError, SchemaOutdated) as exc:
            self.close()
            _refuse(exc)
        self.store, self.lease, self.dispatcher = loop.store, loop.leadership.lease, loop.dispatcher
        self._install_signal_handlers()
        self._warn_schedule_file()
        lease_url = self.settings.lease_url
        log.info(
            "durable beat ready: store %s, lease %s, as %s, %s",
            redact_url(loop.store.url),
            redact_url(lease_url) if lease_url else "in the store",
            getattr(self.lease, "holder", "sole"),
            _namespace_words(self.settings.namespace),
            extra=log_extra(Action.BEAT_STARTED, namespace=self.settings.namespace),
        )
        self._say_wrappers()

    def _say_wrappers(self) -> None:
        """One line per wrapped method of stock beat, so an operator sees that Sentry's (or
        another tool's) hook is in force: each automatic tick goes through it (SPEC §17)."""
        self.wrappers = beat_wrappers()
        for method, wrapper in self.wrappers.items():
            log.info(
                "celery.beat.Scheduler.%s is wrapped by %s: every automatic tick goes through it",
                method,
                wrapper,
                extra=log_extra(Action.BEAT_STARTED),
            )

    def apply_async(
        self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any
    ) -> Any:
        """What Celery's ``apply_entry`` calls once a wrapper of it has run: inside a tick the
        round routes through ``apply_entry`` this publishes the tick, with whatever the wrapper
        added to ``entry.options``, on the round's session (``routed_tick``); anywhere else it
        is stock beat's."""
        tick = routed_tick(entry)
        if tick is None:
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        return tick.publish(self, entry)

    def _warn_schedule_file(self) -> None:
        """``-s FILE`` (``beat_schedule_filename``) is stock beat's shelve file: nothing of it is
        used here, which is said once rather than ignored in silence (SPEC §14)."""
        chosen = self._schedule_file
        if chosen and str(chosen) != STOCK_SCHEDULE_FILE:
            log.warning(
                "-s/--schedule %s (beat_schedule_filename) is ignored: durable beat keeps its "
                "schedules in %s (%s); remove -s",
                chosen,
                self.settings.names.of("url"),
                redact_url(self.settings.url),
                extra=log_extra(Action.BEAT_STARTED),
            )

    def tick(self, *args: Any, **kwargs: Any) -> float:
        now = self.clock.monotonic()
        if now < self._wake_at:
            return self._wake_at - now
        self._in_round = True
        try:
            delay = min(self._round(), self.max_interval)
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
        if self.loop is not None:
            self.loop.close()
        super().close()

    @property
    def info(self) -> str:
        if self._refusal is not None:
            return "    . config -> invalid: beat will refuse to start (the reason follows)"
        lease = redact_url(self.settings.lease_url) if self.settings.lease_url else "store"
        wrapped = "".join(
            f"\n    . {method} -> wrapped by {wrapper}" for method, wrapper in self.wrappers.items()
        )
        return (
            f"    . store -> {redact_url(self.settings.url)}\n"
            f"    . lease -> {lease} (ttl {self.settings.lease_ttl:g}s)\n"
            f"    . namespace -> {self.settings.namespace or 'default'}{wrapped}"
        )

    def _install_signal_handlers(self) -> None:
        """Finish the round in flight before exiting on SIGTERM, SIGINT or SIGHUP (main thread
        only); ``close()`` then releases the lease (SPEC §14)."""

        def handler(signum: int, frame: Any) -> None:
            # No lease work here: Celery swallows what a handler raises. close() releases.
            if not (self._in_round or self._closed):
                raise SystemExit(0)
            self._stop_requested = True

        try:
            for sig in STOP_SIGNALS:
                signal.signal(sig, handler)
        except ValueError:  # not the main thread (embedded beat): Celery's handlers stay
            log.debug(
                "signal handlers left to Celery (not the main thread)",
                extra=log_extra(Action.BEAT_STARTED),
            )

    def _round(self) -> float:
        assert self.loop is not None
        try:
            return self.loop.round()
        except SchemaOutdated as exc:  # upgraded under a running beat: the round said why
            self.close()
            _refuse(exc, logged=True)


def _namespace_words(namespace: str | None) -> str:
    """The namespace a beat leads in, for its start line (SPEC §16)."""
    return "the default namespace" if namespace is None else f"namespace {namespace}"
