"""The beat process's composition root: the round (store, election, dispatcher, gates, metrics)
built from settings. The backends themselves are picked in ``backends`` (shared with the control
API, which must not load the round); this module adds what only beat runs."""

from __future__ import annotations

from typing import Any

from celery_durable_beat.backends import make_lease, make_publisher, make_store
from celery_durable_beat.beat_loop import (
    BASIC_BROKER_ERRORS,
    NO_OBSERVER,
    BeatLoop,
    Redeliverer,
    RoundObserver,
)
from celery_durable_beat.clock import Clock
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import ConfigError, SettingProblem
from celery_durable_beat.gates.base import Gate
from celery_durable_beat.leadership import RENEW_AFTER, Leadership
from celery_durable_beat.runs.base import Runs
from celery_durable_beat.settings import Settings
from celery_durable_beat.signals import RoundSignals
from celery_durable_beat.store.base import Store


def make_redelivery(
    app: Any, settings: Settings, store: Store, runs: Runs, hooks: RoundSignals | None = None
) -> Redeliverer | None:
    """The redelivery sweep (SPEC §6) when ``durable_beat_redeliver_after`` is set: on the
    round's runs and its own publisher, with the broker probe on a Redis broker (FIFO evidence
    elsewhere, ``redelivery.py``); ``hooks``: the round's enqueue hooks (SPEC §17)."""
    if settings.redeliver_after is None:
        return None
    from celery_durable_beat.gates.live_queues import QueueRouter
    from celery_durable_beat.publish.redis_probe import RedisProbe
    from celery_durable_beat.redelivery import RedeliveryPolicy
    from celery_durable_beat.redelivery_sweep import RedeliverySweep

    policy = RedeliveryPolicy(
        round(settings.redeliver_after * 1000),
        settings.redeliver_max,
        horizon_ms=round(settings.dedup_ttl * 1000),
    )
    return RedeliverySweep(
        store,
        make_publisher(app, settings),
        runs,
        policy,
        queue_of=QueueRouter(app),
        probe=RedisProbe(app) if is_redis_broker(app) else None,
        on_recorded=hooks,
    )


def is_redis_broker(app: Any) -> bool:
    """Whether ``app`` publishes through kombu's Redis transport (Sentinel included)."""
    transport = app.connection_for_write().transport
    return getattr(transport, "driver_type", None) == "redis"


def make_gate(app: Any, settings: Settings, store: Store, runs: Runs | None = None) -> Gate:
    """The round's one gate (SPEC §2, §6): overlap, unknown tasks, failing streaks and live
    queues, all on one run tracking picked here (closed with the gate).

    Always built (schedules can gain ``overlap`` or ``require_worker`` at any time through the
    API); it costs nothing for a schedule with none of those keys, and its store engine and Redis
    client connect on first use only.
    """
    from celery_durable_beat.gates.round_gate import RoundGate
    from celery_durable_beat.runs.factory import make_runs

    return RoundGate(app, settings, runs or make_runs(app, settings, store.url))


def make_observer(settings: Settings, store: Store, clock: Clock) -> RoundObserver:
    """Beat's metrics (SPEC §10) when ``durable_beat_metrics_port`` is set, on a registry of
    their own, with ``/healthz`` judged on ``durable_beat_liveness_s`` (its default from the poll
    interval and the lease's renewal interval, ``RENEW_AFTER`` of the TTL: SPEC §2, §17);
    nothing otherwise, and prometheus-client is then never imported.

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
        raise _missing_metrics_client(
            settings.metrics_port, settings.names.of("metrics_port")
        ) from None
    return BeatMetrics(
        SpecRegistry(),
        store=store,
        clock=clock,
        port=settings.metrics_port,
        liveness_s=settings.liveness_seconds(renew_every=settings.lease_ttl * RENEW_AFTER),
    )


def _missing_metrics_client(port: int, setting: str) -> ConfigError:
    """Spelt here, not in ``metrics.py``: that module cannot be imported without the client.
    ``setting``: the port's setting as the user wrote it."""
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


def _refuse_unwritable_store(settings: Settings) -> None:
    """A SQLite store beat could not write is a setting to fix, not an outage to wait out."""
    from celery_durable_beat.store.sql.engine import sqlite_write_problem

    problem = sqlite_write_problem(settings.url)
    if problem is not None:
        name = settings.names.of("url")
        raise ConfigError(
            [
                SettingProblem(
                    "settings",
                    name,
                    f"{name}: the SQLite store cannot be written: {problem}; set "
                    f"{name} to a writable file (sqlite:////var/lib/celery/beat.sqlite3) "
                    "or a PostgreSQL URL",
                )
            ]
        )


def make_beat_loop(app: Any, settings: Settings, clock: Clock, sender: object = None) -> BeatLoop:
    """The rounds of a beat process: ``beat_schedule`` validated (unless config sync is off), the
    store, the election, the dispatcher publishing through ``app``, and the failures that mean
    "the broker is down" (kombu's, besides the OS's). ``sender``: the enqueue hooks' sender
    (``signals``, SPEC §17), the ``Scheduler`` that runs these rounds.

    Nothing connects yet. Raises ``ConfigError`` for an invalid ``beat_schedule`` or lease
    setting (closing the store made before it): beat refuses to start on either.
    """
    from kombu.exceptions import OperationalError as KombuOperationalError

    from celery_durable_beat.celery_config import definitions_from_app, register_custom_schedules

    definitions = definitions_from_app(app, settings) if settings.sync_config else None
    if definitions is None:
        register_custom_schedules(app)  # SPEC §18: their ticks come from the config's objects
    _refuse_unwritable_store(settings)
    store = make_store(settings)
    try:
        lease = make_lease(settings, store)
        observer = make_observer(settings, store, clock)
    except ConfigError:
        store.close()
        raise
    from celery_durable_beat.runs.factory import make_runs

    leadership = Leadership(lease, store, clock, poll_interval=settings.poll_interval)
    runs = make_runs(app, settings, store.url)
    after = settings.redeliver_after
    hooks = RoundSignals(sender)
    dispatcher = Dispatcher(
        store,
        # Its ticks go through the Scheduler's apply_entry when an integration wrapped it (§17).
        make_publisher(app, settings, scheduler=sender),
        batch_size=settings.batch_size,
        quarantine_after=settings.quarantine_after,
        gate=make_gate(app, settings, store, runs),
        still_leader=leadership.keep_leading,
        recheck_ms=round(settings.poll_interval * 1000),
        redeliver_after_ms=None if after is None else round(after * 1000),
        on_recorded=hooks,
    )
    return BeatLoop(
        store,
        dispatcher,
        leadership,
        definitions=definitions,
        history_keep=settings.history_keep,
        broker_errors=(KombuOperationalError, *BASIC_BROKER_ERRORS),
        observer=observer,
        redelivery=make_redelivery(app, settings, store, runs, hooks),
        app_name=app.main or "__main__",
    )
