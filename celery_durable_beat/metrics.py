"""Prometheus metrics (SPEC §10), always on a registry the caller gives, never the global one.

Two producers, the same names:

- ``BeatMetrics``: beat's ``RoundObserver`` (``beat_loop.py``). The rounds tell it what they did;
  it counts ticks, times rounds and serves ``/metrics`` on ``durable_beat_metrics_port`` on a
  daemon thread, on a standby too (``durable_beat_leader 0``), with ``/healthz`` beside it: the
  loop's turns, judged by ``liveness.Liveness`` (SPEC §17). The schedules by state and the
  due backlog are read from the store at most every ``STORE_EVERY_S`` seconds, on the round's
  thread: the work of a round follows what it did, never how many schedules exist.
- ``StatusCollector`` / ``status_registry``: what ``durable-beat serve`` mounts. At scrape time
  it reads ``DurableBeat(app).status`` (cached ``min_interval`` seconds) and reports the
  schedules by state, the due backlog and the fencing epoch.

Labels are low-cardinality words of ``model.py`` only: no label ever carries a schedule name.

This module imports ``prometheus_client`` (the ``metrics`` extra); ``wiring.make_observer``
imports it only when ``durable_beat_metrics_port`` is set, so a base install runs beat without it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from celery_durable_beat.clock import Clock
from celery_durable_beat.dispatch import RoundStats
from celery_durable_beat.exceptions import ConfigError, SettingProblem
from celery_durable_beat.liveness import DEFAULT_LIVENESS_S, HEALTH_PATH, Liveness, beside, listen
from celery_durable_beat.logs import log_extra
from celery_durable_beat.model import Action, Outcome, ScheduleState
from celery_durable_beat.store.base import AuditEvent, StatusStore

log = logging.getLogger("celery_durable_beat.metrics")

__all__ = [
    "BeatMetrics",
    "METRIC_NAMES",
    "SpecRegistry",
    "StatusCollector",
    "StatusLike",
    "status_registry",
]

TICKS = "durable_beat_ticks_total"
DISPATCH_LAG = "durable_beat_dispatch_lag_seconds"
ROUND = "durable_beat_round_seconds"
LAST_ROUND = "durable_beat_last_round_timestamp_seconds"
DUE_BACKLOG = "durable_beat_due_backlog"
SCHEDULES = "durable_beat_schedules"
LEADER = "durable_beat_leader"
FENCING_EPOCH = "durable_beat_fencing_epoch"
REDELIVERED = "durable_beat_redelivered_total"
METRIC_NAMES = (
    TICKS, DISPATCH_LAG, ROUND, LAST_ROUND, DUE_BACKLOG, SCHEDULES, LEADER, FENCING_EPOCH,
    REDELIVERED,
)  # fmt: skip
"""Every metric name of SPEC §10, as exposed (docs/metrics.md lists each; a test checks it)."""

HELP = {
    TICKS: "Ticks recorded by the leader, by outcome, reason ('' if none) and trigger.",
    DISPATCH_LAG: "Seconds from a tick's instant to its dispatch, for enqueued ticks.",
    ROUND: "Seconds one leader round took, lease renewal to settled records.",
    LAST_ROUND: "Unix time the last leader round of this beat completed (0: never led).",
    DUE_BACKLOG: "Active schedules due now and not yet dispatched.",
    SCHEDULES: "Schedules in the store, by state.",
    LEADER: "1 while this beat leads, 0 on a standby.",
    FENCING_EPOCH: "The fencing epoch: this beat's when it leads, the newest seen otherwise.",
    REDELIVERED: "Lost ticks this beat published again with their task id (SPEC §6).",
}

LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
"""Dispatch lag: tens of milliseconds when healthy, up to an hour after an outage (backfill)."""
ROUND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
"""Round duration: an idle round is one index probe, a burst of 500 ticks about a second."""
STORE_EVERY_S = 10.0
"""Least seconds between two reads of the schedules by state and the due backlog on beat."""
DEFAULT_ADDR = "0.0.0.0"  # noqa: S104 - Prometheus scrapes beat from another host or pod
"""Where beat listens for scrapes: every interface, as prometheus_client's own default."""
PORT_SETTING = "durable_beat_metrics_port"


class SpecRegistry(CollectorRegistry):
    """A registry whose scrape holds exactly SPEC §10's series.

    prometheus_client adds a ``_created`` series beside every counter and histogram (one more
    per label set, which no dashboard or rule here reads); this registry leaves them out of what
    it collects. Why not ``prometheus_client.disable_created_metrics()``: it is process-wide, and
    the user's own metrics in the beat process are not ours to change.
    """

    def collect(self) -> Iterator[Metric]:
        for family in super().collect():
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield kept


class BeatMetrics:
    """Beat's metrics on ``registry``, and the ``/metrics`` + ``/healthz`` server when ``port``
    is given.

    A ``RoundObserver``: ``start`` listens (a port that cannot be bound is a ``ConfigError``
    beat refuses to start with), ``standing`` after every round, ``turned`` after each turn of
    the loop (``liveness``, ``liveness_s`` its window), ``round_done`` after each completed
    leader round, ``close`` stops the server.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        store: StatusStore,
        clock: Clock,
        port: int | None = None,
        addr: str = DEFAULT_ADDR,
        store_every: float = STORE_EVERY_S,
        liveness_s: float = DEFAULT_LIVENESS_S,
    ) -> None:
        self.registry = registry
        self.store = store
        self.clock = clock
        self.port = port
        self.addr = addr
        self.store_every = store_every
        self.liveness = Liveness(liveness_s, clock.monotonic)
        self._next_store_read: float | None = None
        self._server: Any = None
        self.ticks = Counter(
            TICKS, HELP[TICKS], ["outcome", "reason", "trigger"], registry=registry
        )
        self.lag = Histogram(
            DISPATCH_LAG, HELP[DISPATCH_LAG], registry=registry, buckets=LAG_BUCKETS
        )
        self.round = Histogram(ROUND, HELP[ROUND], registry=registry, buckets=ROUND_BUCKETS)
        self.last_round = Gauge(LAST_ROUND, HELP[LAST_ROUND], registry=registry)
        self.backlog = Gauge(DUE_BACKLOG, HELP[DUE_BACKLOG], registry=registry)
        self.schedules = Gauge(SCHEDULES, HELP[SCHEDULES], ["state"], registry=registry)
        self.leader = Gauge(LEADER, HELP[LEADER], registry=registry)
        self.epoch = Gauge(FENCING_EPOCH, HELP[FENCING_EPOCH], registry=registry)
        self.redelivered_total = Counter(REDELIVERED, HELP[REDELIVERED], registry=registry)
        for state in ScheduleState:  # every state is a series from the first scrape on
            self.schedules.labels(state.value)

    # -- RoundObserver --------------------------------------------------------------------------
    def start(self) -> None:
        """Serve ``/metrics`` and ``/healthz`` on ``port`` (a daemon thread), if a port was
        given; liveness counts from now."""
        self.liveness.restart()
        if self.port is None or self._server is not None:
            return
        app = beside(make_wsgi_app(self.registry), self.liveness)
        try:
            self._server = listen(self.addr, self.port, app)
        except OSError as exc:
            raise ConfigError(
                [_port_problem(f"{self.port}: cannot listen on it ({exc.strerror or exc})")]
            ) from None
        log.info(
            "serving Prometheus metrics on http://%s:%d/metrics, liveness on %s",
            self.addr,
            self._server.server_port,
            HEALTH_PATH,
            extra=log_extra(Action.METRICS_SERVING, port=self._server.server_port),
        )

    @property
    def server_port(self) -> int | None:
        """The port ``/metrics`` is served on (the bound one when ``port`` was 0)."""
        return None if self._server is None else int(self._server.server_port)

    def standing(self, leader: bool, epoch: int) -> None:
        """Leader or standby and the epoch; the store's counts when they are due a refresh.

        The counts are read first: a scrape that sees this standing sees the counts read with
        it (a standby's first scrape never shows its epoch beside zero schedules).
        """
        now = self.clock.monotonic()
        try:
            if self._next_store_read is None or now >= self._next_store_read:
                self._next_store_read = now + self.store_every  # a failed read waits its turn
                self._read_store()
        finally:
            self.leader.set(1 if leader else 0)
            self.epoch.set(epoch)
            self.liveness.standing(leader)

    def turned(self, sleep: float) -> None:
        """The loop turned (``beat_loop.py``'s rule) and plans to sleep ``sleep`` seconds."""
        self.liveness.turned(sleep)

    def round_done(self, stats: RoundStats | None, seconds: float) -> None:
        """Time the round; count its records (one per tick, or per range of dropped ticks)."""
        self.round.observe(seconds)
        self.last_round.set(self.clock.now_ms() / 1000)
        if stats is None:
            return
        tally: Tally[tuple[str, str, str]] = Tally()
        for event in stats.events:
            ticks = event.detail.get("count", 1) if event.detail else 1
            tally[(event.outcome.value, event.reason or "", event.trigger.value)] += int(ticks)
            if event.outcome is Outcome.ENQUEUED and event.lag_ms is not None:
                self.lag.observe(event.lag_ms / 1000)
        for (outcome, reason, trigger), count in tally.items():
            self.ticks.labels(outcome, reason, trigger).inc(count)

    def redelivered(self, events: Sequence[AuditEvent]) -> None:
        """Count lost ticks sent again, also as ticks (trigger ``redeliver``)."""
        self.redelivered_total.inc(len(events))
        for event in events:
            self.ticks.labels(event.outcome.value, event.reason or "", event.trigger.value).inc()

    def close(self) -> None:
        """Stop serving; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def _read_store(self) -> None:
        counts = self.store.counts_by_state()
        backlog = self.store.due_backlog(self.store.now_ms())
        for state in ScheduleState:
            self.schedules.labels(state.value).set(counts.get(state.value, 0))
        self.backlog.set(backlog)


def _port_problem(text: str) -> SettingProblem:
    return SettingProblem("settings", PORT_SETTING, f"{PORT_SETTING} = {text}")


# -- serve: a collector of DurableBeat.status ------------------------------------------------
class StatusLike(Protocol):
    """What the collector reads of a status (``control.views.StatusView`` has these)."""

    @property
    def counts(self) -> Mapping[str, int]: ...

    @property
    def due_backlog(self) -> int: ...

    @property
    def epoch(self) -> int: ...


class StatusCollector(Collector):
    """Schedules by state, due backlog and fencing epoch, read from a status at scrape time.

    ``read_status`` is called on the scraping thread, at most once per ``min_interval``
    seconds (concurrent scrapes share one read); what it raises fails that scrape, so a store
    that does not answer shows as a failed scrape, never as stale numbers.
    """

    def __init__(
        self,
        read_status: Callable[[], StatusLike],
        *,
        min_interval: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read_status = read_status
        self.min_interval = min_interval
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._cached: tuple[float, StatusLike] | None = None

    def describe(self) -> list[Metric]:
        """The families without reading a status (registering must not touch the store)."""
        return list(_status_families(None))

    def collect(self) -> Iterator[Metric]:
        yield from _status_families(self._status())

    def _status(self) -> StatusLike:
        with self._lock:
            now = self.monotonic()
            if self._cached is None or now - self._cached[0] >= self.min_interval:
                self._cached = (now, self.read_status())
            return self._cached[1]


def _status_families(status: StatusLike | None) -> Iterator[Metric]:
    schedules = GaugeMetricFamily(SCHEDULES, HELP[SCHEDULES], labels=["state"])
    backlog = GaugeMetricFamily(DUE_BACKLOG, HELP[DUE_BACKLOG])
    epoch = GaugeMetricFamily(FENCING_EPOCH, HELP[FENCING_EPOCH])
    if status is not None:
        for state in ScheduleState:
            schedules.add_metric([state.value], status.counts.get(state.value, 0))
        backlog.add_metric([], status.due_backlog)
        epoch.add_metric([], status.epoch)
    yield from (schedules, backlog, epoch)


def status_registry(
    read_status: Callable[[], StatusLike], *, min_interval: float = 5.0
) -> CollectorRegistry:
    """A new registry holding one ``StatusCollector``: mount it with
    ``prometheus_client.make_asgi_app(status_registry(DurableBeat(app).status))``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(read_status, min_interval=min_interval))
    return registry
