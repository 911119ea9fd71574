"""Prometheus alerts per schedule, through the enqueue hooks (docs/monitoring.md).

Beat's own metrics carry no schedule names on purpose (SPEC §10: low-cardinality labels only),
so "the nightly report has not been sent for 26 hours" cannot be asked of them. When you know
your schedules are few (tens, not thousands), this receiver keeps two series per schedule in a
registry of your own:

- ``beat_schedule_last_enqueued_timestamp_seconds{schedule}``: when its last tick was recorded
  ``enqueued`` (the record committed: the message is on the broker);
- ``beat_schedule_skipped_total{schedule, reason}``: ticks recorded ``skipped``, by reason.

Import it in the module beat loads (``-A proj``) and serve the registry on a port of its own,
e.g. once beat starts::

    # proj.py
    from celery import signals
    import prometheus_per_schedule

    @signals.beat_init.connect
    def _serve_schedule_metrics(**_):
        prometheus_per_schedule.serve(9810)

Every beat serves it (the leader's values move; a standby's stay where they were when it last
led), so alert on the newest value across beats, e.g. in Prometheus::

    max by (schedule) (beat_schedule_last_enqueued_timestamp_seconds) < time() - 26 * 3600
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from celery_durable_beat.signals import tick_enqueued, tick_skipped

REGISTRY = CollectorRegistry()
"""These series only, apart from beat's own (which never name a schedule)."""

LAST_ENQUEUED = Gauge(
    "beat_schedule_last_enqueued_timestamp_seconds",
    "When the schedule's last tick was recorded enqueued (Unix time).",
    ["schedule"],
    registry=REGISTRY,
)
SKIPPED = Counter(
    "beat_schedule_skipped",
    "Ticks of the schedule recorded skipped, by reason.",
    ["schedule", "reason"],
    registry=REGISTRY,
)


@tick_enqueued.connect
def _on_enqueued(sender: Any, schedule: str, tick: Any, **_: Any) -> None:
    """The tick's planned instant, not the wall clock: a catch-up tick says what it was for."""
    LAST_ENQUEUED.labels(schedule=schedule).set(tick.timestamp())


@tick_skipped.connect
def _on_skipped(sender: Any, schedule: str, reason: str, count: int = 1, **_: Any) -> None:
    """A dropped range of missed ticks is one signal carrying its ``count``."""
    SKIPPED.labels(schedule=schedule, reason=reason).inc(count or 1)


def serve(port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104  a metrics port is scraped
    """Serve ``REGISTRY`` on ``port`` (a daemon thread, as beat's own metrics server)."""
    start_http_server(port, addr, registry=REGISTRY)
