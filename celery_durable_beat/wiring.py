"""Concrete backends from settings: the one place that picks SQL, Redis or a sole lease."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from celery_durable_beat.beat_loop import BASIC_BROKER_ERRORS, NO_OBSERVER, BeatLoop, RoundObserver
from celery_durable_beat.clock import Clock
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import ConfigError, ConfigProblem, SettingProblem
from celery_durable_beat.leadership import Leadership
from celery_durable_beat.lease.base import HolderInfo, Lease
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Reason
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import DueSchedule, LeaderInfo, SchemaStore, Store
from celery_durable_beat.urls import redact_url

if TYPE_CHECKING:
    from celery_durable_beat.lease.redis import RedisLease
    from celery_durable_beat.publish import CeleryPublisher
    from celery_durable_beat.runs.sql import SqlRunStore


def make_store(settings: Settings) -> Store:
    from celery_durable_beat.store.sql import SqlStore

    return SqlStore(settings.url, stall_timeout_s=settings.lease_ttl)


def make_lease(settings: Settings, store: Store) -> Lease:
    """The Redis lease when ``durable_beat_lease_url`` is set, else the store's lease row.

    Builds clients without connecting (Celery makes throwaway scheduler instances); a missing
    driver or a URL Redis cannot parse is a configuration error beat refuses to start with.
    """
    if settings.lease_url:
        return _redis_lease(settings, store)
    from celery_durable_beat.lease.sql import StoreLease, WriteTransactions

    if not isinstance(store, WriteTransactions):
        raise _lease_url_problem(
            f"the store {type(store).__name__} has no lease row; set it to a redis:// URL"
        )
    return StoreLease(store, settings.lease_ttl)


def _redis_lease(settings: Settings, store: Store) -> Lease:
    return _new_redis_lease(settings, epoch_floor=lambda: store.leader_info().epoch)


def _new_redis_lease(settings: Settings, **options: Any) -> RedisLease:
    """A RedisLease on the settings' URL and transport options, or the configuration error of a
    missing driver or a URL no client can be built from."""
    url = str(settings.lease_url)
    try:
        from celery_durable_beat.lease.redis import RedisLease
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise _lease_url_problem(
            "a Redis lease needs the redis package: pip install 'celery_durable_beat[redis]'"
        ) from None
    try:
        return RedisLease(
            url,
            settings.lease_ttl,
            transport_options=settings.lease_transport_options,
            **options,
        )
    except ValueError as exc:
        raise _lease_url_problem(
            f"{redact_url(url)} is not a Redis URL ({exc}); use e.g. redis://host:6379/0"
        ) from None


class LeaseReader:
    """Who holds a lease kept outside the store, read without taking it (lease rule 5), as the
    store's ``LeaderInfo`` so ``status`` reads either kind of lease alike."""

    def __init__(self, lease: HolderInfo) -> None:
        self.lease = lease

    def read(self) -> LeaderInfo:
        seen = self.lease.holder_info()
        return LeaderInfo(holder=seen.holder, epoch=seen.epoch, expires_at_ms=seen.expires_at_ms)

    def close(self) -> None:
        self.lease.close()


def make_lease_reader(settings: Settings) -> LeaseReader | None:
    """The reader of the Redis lease when ``durable_beat_lease_url`` is set; None when the lease
    is the store's row (``Store.leader_info`` reads that). Connects on first read only."""
    if not settings.lease_url:
        return None
    return LeaseReader(_new_redis_lease(settings, holder="status"))


def _lease_url_problem(text: str) -> ConfigError:
    field = "durable_beat_lease_url"
    return ConfigError([ConfigProblem("settings", field, f"{field}: {text}")])


def make_publisher(app: Any, settings: Settings) -> CeleryPublisher:
    """The publisher of beat's rounds and of manual runs: the app's producers, and
    ``durable_beat_redact`` applied to every tick message's ``argsrepr`` / ``kwargsrepr``."""
    from celery_durable_beat.publish import CeleryPublisher

    return CeleryPublisher(app, redact_keys=settings.redact)


Gate = Callable[[DueSchedule, TickMessage], Reason | None]
UnknownTasks = Callable[[Sequence[DueSchedule]], set[int]]
FailedRuns = Callable[[Sequence[DueSchedule]], set[int]]
WorkerCheck = Callable[[], Callable[[TickMessage], bool]]


def make_gate(app: Any, settings: Settings, store: Store) -> Gate | None:
    """The overlap gate of the round (SPEC §6).

    Always built (schedules can gain ``overlap`` at any time through the API); it costs nothing
    for ``allow`` schedules, and its store engine and Redis client connect on first use only.
    """
    from celery_durable_beat.runs.factory import make_runs
    from celery_durable_beat.worker.overlap import OverlapGate

    return OverlapGate(app, settings, make_runs(app, settings, store.url))


def make_unknown_tasks(gate: Gate | None) -> UnknownTasks | None:
    """The round's read of ticks no worker knew (SPEC §6), on the gate's run tracking (one
    engine for both, closed with the gate)."""
    from celery_durable_beat.worker.overlap import OverlapGate
    from celery_durable_beat.worker.unknown import UnknownTaskWatch

    return UnknownTaskWatch(gate.runs) if isinstance(gate, OverlapGate) else None


def make_failed_runs(gate: Gate | None) -> FailedRuns | None:
    """The round's read of failing streaks (``pause_on_failure``), on the gate's run tracking."""
    from celery_durable_beat.worker.overlap import OverlapGate
    from celery_durable_beat.worker.streaks import FailedRunsWatch

    return FailedRunsWatch(gate.runs) if isinstance(gate, OverlapGate) else None


def make_worker_check(app: Any, settings: Settings, gate: Gate | None) -> WorkerCheck | None:
    """The round's ``require_worker`` check (SPEC §2): live workers read from the gate's run
    tracking (one engine for both, closed with the gate), queues resolved by ``app``'s router."""
    from celery_durable_beat.worker.overlap import OverlapGate
    from celery_durable_beat.worker.presence import QueueWatch

    if not isinstance(gate, OverlapGate):
        return None
    return QueueWatch(app, gate.runs, settings.worker_ttl)


def make_worker_registry(store: SchemaStore) -> SqlRunStore | None:
    """Where ``status`` reads the live workers: the run tracking on a SQL store's URL (built
    without connecting); None for a store with no such table (the in-memory one)."""
    from celery_durable_beat.runs.factory import make_tracking
    from celery_durable_beat.store.sql import SqlStore

    return make_tracking(store.url) if isinstance(store, SqlStore) else None


def make_observer(settings: Settings, store: Store, clock: Clock) -> RoundObserver:
    """Beat's metrics (SPEC §10) when ``durable_beat_metrics_port`` is set, on a registry of
    their own; nothing otherwise, and prometheus-client is then never imported.

    Raises ``ConfigError`` naming the setting and the install line when the port is set and
    prometheus-client is missing: beat refuses to start rather than run unobserved.
    """
    if settings.metrics_port is None:
        return NO_OBSERVER
    try:
        from celery_durable_beat.metrics import BeatMetrics, SpecRegistry
    except ImportError as exc:
        if not (exc.name or "").startswith("prometheus_client"):
            raise
        raise _missing_metrics_client(settings.metrics_port) from None
    return BeatMetrics(SpecRegistry(), store=store, clock=clock, port=settings.metrics_port)


def _missing_metrics_client(port: int) -> ConfigError:
    """Spelt here, not in ``metrics.py``: that module cannot be imported without the client."""
    setting = "durable_beat_metrics_port"
    return ConfigError(
        [
            SettingProblem(
                "settings",
                setting,
                f"{setting} = {port}: serving metrics needs prometheus-client: "
                "pip install 'celery_durable_beat[metrics]'",
            )
        ]
    )


def make_beat_loop(app: Any, settings: Settings, clock: Clock) -> BeatLoop:
    """The rounds of a beat process: ``beat_schedule`` validated (unless config sync is off), the
    store, the election, the dispatcher publishing through ``app``, and the failures that mean
    "the broker is down" (kombu's, besides the OS's).

    Nothing connects yet. Raises ``ConfigError`` for an invalid ``beat_schedule`` or lease
    setting (closing the store made before it): beat refuses to start on either.
    """
    from kombu.exceptions import OperationalError as KombuOperationalError

    from celery_durable_beat.celery_config import definitions_from_app

    definitions = definitions_from_app(app, settings) if settings.sync_config else None
    store = make_store(settings)
    try:
        lease = make_lease(settings, store)
        observer = make_observer(settings, store, clock)
    except ConfigError:
        store.close()
        raise
    leadership = Leadership(lease, store, clock, poll_interval=settings.poll_interval)
    gate = make_gate(app, settings, store)
    dispatcher = Dispatcher(
        store,
        make_publisher(app, settings),
        batch_size=settings.batch_size,
        quarantine_after=settings.quarantine_after,
        gate=gate,
        still_leader=leadership.keep_leading,
        unknown_tasks=make_unknown_tasks(gate),
        failed_runs=make_failed_runs(gate),
        recheck_ms=round(settings.poll_interval * 1000),
        worker_check=make_worker_check(app, settings, gate),
    )
    return BeatLoop(
        store,
        dispatcher,
        leadership,
        definitions=definitions,
        history_keep=settings.history_keep,
        broker_errors=(KombuOperationalError, *BASIC_BROKER_ERRORS),
        observer=observer,
    )
