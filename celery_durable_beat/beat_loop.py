"""The beat's rounds: lead, sync config, dispatch what is due, then say how long to sleep.

One ``BeatLoop.round()`` per wake-up of the scheduler, and it never raises for an outage
(SPEC §7: beat logs, backs off and resumes); only an outdated schema stops beat, since no retry
fixes that. Each round:

1. makes sure the schema exists (a store that was down at start is retried here);
2. acquires the lease, or renews it once a third of its TTL has passed (``Leadership``); a
   standby sleeps until its next try;
3. on a new epoch, syncs ``beat_schedule`` into the store (once per epoch), in fenced batches
   with the lease renewed before each; a sync cut short by a lost lease runs again next time;
4. asks the store for its clock and the earliest due instant in one query, and claims only when
   something is due (renewing the lease first), so an idle round is one index probe;
5. with redelivery on (``durable_beat_redeliver_after``), gives its ``Redeliverer``
   (``redelivery_sweep.py``) the chance to send lost ticks again: it sweeps at most every few
   seconds, one indexed query when nothing is watched, never during a burst;
6. between rounds (never while a burst keeps rounds back to back), prunes the history of the
   schedules it touched: a pass starts at most once a minute and spends at most
   ``PRUNE_BUDGET`` of the TTL per round, ``PRUNE_CHUNK`` schedules per statement; what is left
   waits for the next quiet round.

Failures grow the wait (capped at a third of the TTL, so a leader still renews in time). A broker
outage is remembered across the idle rounds that follow, so they do not reset the backoff while
the ticks stay due. Nothing here knows Celery: the scheduler passes the broker's exception types.

What a round did is told to a ``RoundObserver`` (``metrics.BeatMetrics`` when
``durable_beat_metrics_port`` is set, else ``NO_OBSERVER``): the standing after every round, each
turn, and each completed leader round with its records. The observer never stops beat: whatever
it raises is logged (``metrics_failed``) and the round goes on.

A *turn* (what ``/healthz`` judges: SPEC §17, ``liveness.py``) is a round that ended with its
backends answering, i.e. did not back off: a leader's round that dispatched, found nothing due or
stopped early for the lease; a standby's lease attempt answered, "held by another" included (all
a standby has to do is try, so beside a healthy leader it turns every round); a round fenced out
(the store answered, with a refusal). Not a turn: a round that failed on the store, the lease or
the broker, or raised anything else, nor one still running (a call that never returns). So a
leader whose store or broker stops answering stops turning even while it keeps a Redis lease,
and answers 503 after ``durable_beat_liveness_s``: the restart that follows releases (or lets
expire) a lease it cannot use, for a standby that may. A standby on a Redis lease turns through
a store outage; on the store's lease it cannot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from celery_durable_beat.burst import BurstRounds
from celery_durable_beat.dispatch import Dispatcher, RoundStats
from celery_durable_beat.exceptions import (
    LeaseError,
    SchemaOutdated,
    StaleEpoch,
    StoreError,
    StoreUnavailable,
)
from celery_durable_beat.leadership import Leadership
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action, Definition
from celery_durable_beat.store.base import PRUNE_CHUNK, AuditEvent, BeatStore
from celery_durable_beat.sync import sync_definitions

# One logger for the whole beat process (scheduler, leadership, loop), as before the split.
log = logging.getLogger("celery_durable_beat.scheduler")

PRUNE_EVERY_MS = 60_000
"""Least time between the starts of two history pruning passes (by the store's clock)."""
PRUNE_BUDGET = 0.02
"""Most of the lease TTL one round spends pruning (0.6 s of 30 s): a pass never risks the lease."""
BACKOFF_MAX_S = 30.0
"""Longest wait after failed rounds (a third of the TTL caps it further)."""
BURST_BUDGET_S = 1.0
"""How long a burst's rounds run back to back before the loop looks up (a SIGTERM waits for
that and the round in flight); the next call goes on with the burst at once."""
BASIC_BROKER_ERRORS: tuple[type[Exception], ...] = (ConnectionError, OSError, TimeoutError)
"""Failures that escape the publisher (e.g. taking a broker connection): a broker outage. The
scheduler adds its transport's own (kombu's ``OperationalError``)."""


class RoundObserver(Protocol):
    """What the rounds tell metrics; called on the round's own thread, between two rounds.

    Each call is O(records of the round): nothing here may grow with the number of schedules.
    """

    def start(self) -> None:
        """Beat is starting (before its first round): e.g. listen on the metrics port."""

    def standing(self, leader: bool, epoch: int) -> None:
        """After every round, leader or standby, failed or not: who this beat is now."""

    def turned(self, sleep: float) -> None:
        """After a round that was a turn (the module docstring's rule), before the scheduler's
        sleep of at most ``sleep`` seconds until the next round."""

    def round_done(self, stats: RoundStats | None, seconds: float) -> None:
        """A leader round completed (``stats`` None: nothing was due), ``seconds`` long."""

    def redelivered(self, events: Sequence[AuditEvent]) -> None:
        """Lost ticks were sent again, recorded as ``events`` (trigger ``redeliver``)."""

    def close(self) -> None:
        """Beat is shutting down; idempotent."""


class Redeliverer(Protocol):
    """The redelivery sweep as the loop sees it (``redelivery_sweep.RedeliverySweep``)."""

    def maybe_sweep(
        self, now_ms: int, epoch: int, leads: Callable[[], bool] = ...
    ) -> Sequence[AuditEvent]:
        """Sweep if it is time, publishing only while ``leads()``; the redeliveries recorded.
        Raises ``StaleEpoch`` if fenced."""

    def close(self) -> None:
        """Release what the sweep holds; idempotent."""


class _NoObserver:
    """The observer when metrics are off: does nothing."""

    def start(self) -> None:
        pass

    def standing(self, leader: bool, epoch: int) -> None:
        pass

    def turned(self, sleep: float) -> None:
        pass

    def round_done(self, stats: RoundStats | None, seconds: float) -> None:
        pass

    def redelivered(self, events: Sequence[AuditEvent]) -> None:
        pass

    def close(self) -> None:
        pass


NO_OBSERVER: RoundObserver = _NoObserver()


class BeatLoop:
    """The rounds of one beat process, over the store, the dispatcher and the election."""

    def __init__(
        self,
        store: BeatStore,
        dispatcher: Dispatcher,
        leadership: Leadership,
        *,
        definitions: Sequence[Definition] | None,
        history_keep: int,
        broker_errors: tuple[type[Exception], ...] = BASIC_BROKER_ERRORS,
        observer: RoundObserver = NO_OBSERVER,
        redelivery: Redeliverer | None = None,
        app_name: str | None = None,
    ) -> None:
        """``definitions`` is what config sync makes the store hold; None turns sync off;
        ``redelivery`` None: lost ticks are not sent again; ``app_name`` (the app's ``main``)
        is whose config rows sync keeps and archives (SPEC §16)."""
        self.app_name = app_name
        self.observer = observer
        self.redelivery = redelivery
        self._started = 0.0
        self.store = store
        self.dispatcher = dispatcher
        self.bursts = BurstRounds(dispatcher, store.now_ms)
        self.leadership = leadership
        self.definitions = definitions
        self.history_keep = history_keep
        self.broker_errors = broker_errors
        self.schema_ready = False
        self.broker_down = False
        self.failures = 0
        self._backed_off = False  # this round backed off: it is no turn
        self._synced_epoch: int | None = None
        self._touched: set[str] = set()
        self._pruning: list[str] = []  # names of the pass in progress, not yet pruned
        self._last_prune_ms = 0

    def prepare(self) -> None:
        """Start the observer (metrics), then create the schema now if the store answers; an
        outage at start is retried by rounds. The observer may refuse with ``ConfigError``."""
        self.observer.start()
        try:
            self.store.ensure_schema()
        except StoreUnavailable as exc:
            log.warning(
                "store unavailable at start (%s); beat keeps trying",
                exc,
                extra=log_extra(Action.STORE_UNAVAILABLE),
            )
        else:
            self.schema_ready = True

    def round(self) -> float:
        """One round; the seconds until the next. Raises only ``SchemaOutdated``."""
        self._started = self.leadership.clock.monotonic()
        self._backed_off = False
        try:
            delay = self._round()
        finally:
            self._observe_standing()
        if not self._backed_off:
            self._observe(self.observer.turned, delay)
        return delay

    def _round(self) -> float:
        try:
            self._ensure_schema()
            if not self._lead():
                return self.leadership.standby_delay()
            return self._dispatch()
        except StaleEpoch:
            self.leadership.fenced()
            return self.leadership.standby_delay()
        except SchemaOutdated as exc:
            log.critical("beat refuses to run: %s", exc, extra=log_extra(Action.BEAT_REFUSED))
            raise
        except Exception as exc:
            return self._failed_round(exc)

    def _failed_round(self, exc: Exception) -> float:
        """Back off, the failure tagged by its real cause."""
        if isinstance(exc, StoreError):
            return self._backoff(Action.STORE_UNAVAILABLE, str(exc))
        if isinstance(exc, LeaseError):
            return self._backoff(Action.LEASE_UNAVAILABLE, str(exc))
        if isinstance(exc, self.broker_errors):
            self.broker_down = True
            return self._backoff(Action.BROKER_UNAVAILABLE, f"broker unavailable: {cause(exc)}")
        return self._backoff(Action.ROUND_FAILED, f"unexpectedly: {cause(exc)}", exc)

    def _observe_standing(self) -> None:
        leadership = self.leadership
        leader = bool(leadership.was_leader)
        seen = leadership.status.epoch if leadership.status is not None else 0
        epoch = leadership.epoch if leader else max(seen, leadership.epoch)
        self._observe(self.observer.standing, leader, epoch)

    def _observe_round(self, stats: RoundStats | None) -> None:
        seconds = self.leadership.clock.monotonic() - self._started
        self._observe(self.observer.round_done, stats, seconds)

    def _observe(self, call: Callable[..., None], *args: object) -> None:
        """Call the observer; metrics never stop a round."""
        try:
            call(*args)
        except Exception as exc:
            log.warning(
                "metrics not updated: %s", cause(exc), extra=log_extra(Action.METRICS_FAILED)
            )

    def _ensure_schema(self) -> None:
        if not self.schema_ready:
            self.store.ensure_schema()
            self.schema_ready = True

    def _lead(self) -> bool:
        """Renew or acquire; config-sync once per epoch; whether to dispatch now."""
        if not self.leadership.acquire():
            return False
        epoch = self.leadership.epoch
        if self.definitions is not None and self._synced_epoch != epoch:
            report = sync_definitions(
                self.store,
                self.definitions,
                self.store.now_ms(),
                epoch=epoch,
                renew=lambda: self._renew(epoch),
                app=self.app_name,
                namespace=self.store.namespace,
            )
            if not report.complete:
                return False
            self._synced_epoch = epoch
        return self.leadership.still_leader()

    def _renew(self, epoch: int) -> bool:
        """Between two sync batches: renew now; go on only as the leader of the same epoch."""
        return (
            self.leadership.acquire(fresh_for=0.0)
            and self.leadership.epoch == epoch
            and self.leadership.still_leader()
        )

    def _dispatch(self) -> float:
        """Claim only when something is due: an idle round is one index probe."""
        now_ms, due = self.store.clock_and_earliest_due()
        if due is None or due > now_ms:
            if not self.broker_down:  # idle rounds between broker retries keep the backoff
                self.failures = 0
            self._observe_round(None)
            self._redeliver(now_ms)
            self._maybe_prune(now_ms)  # a quiet moment: finish a pass cut short by its budget
            return self.delay(due, now_ms)
        if not self.leadership.acquire(fresh_for=0.0):  # renewed before anything is published
            return self.leadership.standby_delay()
        try:
            stats = self.bursts.run(now_ms, self.leadership.epoch, self._burst_goes_on())
        except BaseException:
            if self.bursts.finished.claimed:  # rounds committed before the failure count
                self._count_finished(self.bursts.finished)
            raise
        self._count_finished(stats)
        self.broker_down = stats.broker_unavailable
        if stats.broker_unavailable:
            return self._backoff(
                Action.BROKER_UNAVAILABLE, "broker unavailable: the ticks stay due"
            )
        self.failures = 0
        if not self.leadership.still_leader():
            return 0.0  # stopped early for the lease: renew (or learn who leads) right away
        if stats.more_due:
            return 0.0  # a burst: the next round now, pruning waits until it is over
        self._redeliver(now_ms)
        self._maybe_prune(now_ms)
        now_ms, due = self.store.clock_and_earliest_due()
        return self.delay(due, now_ms)

    def _count_finished(self, stats: RoundStats) -> None:
        """Metrics and the next pruning pass learn of rounds whose records are committed."""
        self._observe_round(stats)
        self._touched.update(e.schedule for e in stats.events)

    def _burst_goes_on(self) -> Callable[[], bool]:
        """While a burst may take one more round: the lease still covers it, and the burst
        has not used up ``BURST_BUDGET_S``."""
        clock = self.leadership.clock
        until = clock.monotonic() + BURST_BUDGET_S
        return lambda: self.leadership.still_leader() and clock.monotonic() < until

    def _redeliver(self, now_ms: int) -> None:
        """Let the sweep send lost ticks again, as the leader of this epoch (fenced)."""
        if self.redelivery is None or not self.leadership.still_leader():
            return
        events = self.redelivery.maybe_sweep(
            now_ms, self.leadership.epoch, self.leadership.still_leader
        )
        if events:
            self._observe(self.observer.redelivered, events)

    def delay(self, due_ms: int | None, now_ms: int) -> float:
        """A leader's sleep: until the earliest due instant, at most ``max_sleep``."""
        longest = self.leadership.max_sleep()
        if due_ms is None:
            return longest
        return max(0.0, min((due_ms - now_ms) / 1000, longest))

    def _backoff(self, action: Action, why: str, unexpected: Exception | None = None) -> float:
        """Wait longer after each failed round; say why, once a round, tagged by the cause:
        ``store_unavailable``, ``lease_unavailable``, ``broker_unavailable`` as a warning (the
        store's and the lease's messages name their URL without its password), or
        ``round_failed`` — nobody foresaw it — as an error with its traceback."""
        self.failures += 1
        self._backed_off = True
        self.leadership.lose_if_lapsed()
        delay = self.backoff_delay()
        log.log(
            logging.WARNING if unexpected is None else logging.ERROR,
            "round failed (%s); retrying in %.1fs",
            why,
            delay,
            exc_info=unexpected,
            extra=log_extra(action),
        )
        return delay

    def backoff_delay(self) -> float:
        """0.5 s doubling with each failed round in a row, capped at a third of the TTL."""
        cap = min(BACKOFF_MAX_S, self.leadership.ttl_seconds / 3)
        return float(min(cap, 0.5 * 2 ** min(self.failures - 1, 10)))

    def _maybe_prune(self, now_ms: int) -> None:
        """Prune a slice of the pass in progress, or start one, within ``PRUNE_BUDGET``."""
        if not self._pruning:
            if not self._touched or now_ms - self._last_prune_ms < PRUNE_EVERY_MS:
                return
            self._pruning = sorted(self._touched)
            self._touched.clear()
            self._last_prune_ms = now_ms
        clock = self.leadership.clock
        deadline = clock.monotonic() + self.leadership.ttl_seconds * PRUNE_BUDGET
        while self._pruning and self.leadership.still_leader():
            chunk, self._pruning = self._pruning[:PRUNE_CHUNK], self._pruning[PRUNE_CHUNK:]
            self.store.prune_history(chunk, self.history_keep)
            if clock.monotonic() >= deadline:
                break

    def close(self) -> None:
        """Release the lease (only if held), then close the round's gate (its run tracking), the
        store and the observer (the metrics server)."""
        try:
            self.bursts.close()  # no settle left in flight when the lease goes
            self.leadership.close()
            if self.redelivery is not None:
                self.redelivery.close()
            self.dispatcher.gate.close()
            self.store.close()
        finally:
            self._observe(self.observer.close)
