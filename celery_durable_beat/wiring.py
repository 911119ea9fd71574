"""The beat process's composition root: the round (store, election, dispatcher, gates, metrics)
built from settings. The backends themselves are picked in ``backends`` (shared with the control
API, which must not load the round); this module adds what only beat runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from celery_durable_beat.backends import make_lease, make_publisher, make_store
from celery_durable_beat.beat_loop import BASIC_BROKER_ERRORS, NO_OBSERVER, BeatLoop, RoundObserver
from celery_durable_beat.clock import Clock
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import ConfigError, SettingProblem
from celery_durable_beat.leadership import Leadership
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Reason
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import DueSchedule, Store

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
