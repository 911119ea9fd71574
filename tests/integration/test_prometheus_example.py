"""The docs' per-schedule Prometheus receiver (``examples/monitoring/prometheus_per_schedule.py``)
driven by FrozenBeat's real rounds: each schedule's last enqueued instant and skips by reason."""

from __future__ import annotations

import importlib
import sys
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from types import ModuleType

import pytest
from celery import Celery

from celery_durable_beat.signals import tick_enqueued, tick_skipped
from celery_durable_beat.testing import FrozenBeat
from tests.support.procs import free_port, wait_until

pytestmark = pytest.mark.integration  # serves the example registry on a local port


@pytest.fixture
def example() -> Iterator[ModuleType]:
    """The example imported (which connects its receivers), and its receivers disconnected
    afterwards: the signals are process-wide, and other tests count their receivers."""
    module = importlib.import_module("examples.monitoring.prometheus_per_schedule")
    try:
        yield module
    finally:
        tick_enqueued.disconnect(module._on_enqueued)
        tick_skipped.disconnect(module._on_skipped)
        sys.modules.pop(module.__name__, None)


def test_each_schedule_gets_its_last_enqueued_instant_and_its_skips(example: ModuleType) -> None:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        timezone="UTC",
        beat_schedule={
            "pulse": {"task": "proj.pulse", "schedule": 60.0},
            "hourly": {"task": "proj.hourly", "schedule": "0 * * * *"},
        },
    )
    with FrozenBeat(app, start="2026-03-07T00:00:00Z") as beat:
        beat.advance("1h")
        beat.advance("10m", beat_running=False)  # ten pulse ticks come due meanwhile
        beat.advance("1s")  # the latest fires, nine are dropped (missed: skip)
    value = example.REGISTRY.get_sample_value
    last = value("beat_schedule_last_enqueued_timestamp_seconds", {"schedule": "pulse"})
    assert last == datetime(2026, 3, 7, 1, 10, tzinfo=timezone.utc).timestamp()
    hourly = value("beat_schedule_last_enqueued_timestamp_seconds", {"schedule": "hourly"})
    assert hourly == datetime(2026, 3, 7, 1, 0, tzinfo=timezone.utc).timestamp()
    assert value("beat_schedule_skipped_total", {"schedule": "pulse", "reason": "missed"}) == 9
    port = free_port()
    example.serve(port, "127.0.0.1")
    text = wait_until(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read(),
        10,
        "the example's metrics page",
    ).decode()
    assert 'beat_schedule_skipped_total{reason="missed",schedule="pulse"} 9.0' in text
