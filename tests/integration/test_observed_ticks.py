"""Seen by the tools users already run (SPEC §17), in real ``celery beat -S
celery_durable_beat.Scheduler`` and ``celery worker`` processes on PostgreSQL and Redis:

- the real sentry-sdk with ``CeleryIntegration(monitor_beat_tasks=True)`` in beat and in the
  worker (``tests/support/observers.py``, on a transport that writes each envelope to a file):
  every tick is an ``in_progress`` check-in from beat, then ``ok`` (or ``error`` for a failing
  task) from the worker under the same check-in id, with the monitor slug and config Sentry's own
  code gives the same entry under stock beat;
- ``opentelemetry-instrumentation-celery`` in both: each tick's publish span in beat and its run
  span in the worker share one trace, the run span a child of the publish span, one trace per
  tick, on the Redis broker (whose templated path steps aside for ``before_task_publish``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery, beat
from celery.schedules import crontab
from sentry_sdk.integrations.celery.beat import _apply_crons_data_to_schedule_entry

from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.sync import sync_definitions
from tests.support.procs import read_jsonl, wait_until
from tests.support.rig import ProcessRig, rig_factory

pytestmark = pytest.mark.integration

ZONE = "Europe/Berlin"
CRONS = {
    "nightly-report": {
        "task": "procapp.record",
        "schedule": "* * * * *",
        "missed": "backfill",
        "backfill_max": 5,
    },
    "failing-report": {
        "task": "procapp.broken",
        "schedule": "* * * * *",
        "missed": "backfill",
        "backfill_max": 5,
    },
}
"""Every minute, with up to five missed minutes fired: a test cannot wait for two minutes, so
the schedules are stored as if synced two minutes ago (``_synced_in_the_past``) and beat's first
round catches up on the minutes since, one automatic tick each, through Sentry's wrapper."""


@pytest.fixture
def make_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Any]:
    rig = partial(ProcessRig, store_url=pg_url, broker_url=redis_url)
    with rig_factory(tmp_path, rig) as make:
        yield make


def _synced_in_the_past(store_url: str, schedule: dict[str, Any], ago_ms: int) -> None:
    """Config sync of ``schedule`` as the test app's beat does it, ``ago_ms`` ago: beat's own
    sync then finds the schedules unchanged and their next tick long due."""
    app = Celery("procapp", set_as_current=False)
    app.conf.update(timezone=ZONE, beat_schedule=schedule, task_ignore_result=True)
    definitions = definitions_from_app(app, Settings.from_conf(app.conf, environ={}))
    store = SqlStore(store_url)
    try:
        sync_definitions(store, definitions, store.now_ms() - ago_ms, app="procapp")
    finally:
        store.close()


def _stock_monitor(name: str, task: str) -> dict[str, Any]:
    """The slug and monitor config Sentry's own code gives stock beat's entry of that name: a
    ``crontab()`` (every minute) in the app's zone."""
    app = Celery("stock", set_as_current=False)
    app.conf.timezone = ZONE
    entry = beat.ScheduleEntry(name, task, schedule=crontab(), app=app)
    integration = SimpleNamespace(monitor_beat_tasks=True, exclude_beat_tasks=None)
    _apply_crons_data_to_schedule_entry(SimpleNamespace(app=app), entry, integration)
    headers = entry.options["headers"]
    return {"slug": headers["sentry-monitor-slug"], "config": headers["sentry-monitor-config"]}


def _check_ins(path: Path) -> list[dict[str, Any]]:
    return [
        {**row["payload"], "pid": row["pid"]}
        for row in read_jsonl(path)
        if row["type"] == "check_in"
    ]


def _enqueued(rig: ProcessRig, name: str) -> list[str]:
    return sorted(r.task_id for r in rig.history(name) if r.outcome.value == "enqueued")


def test_sentry_crons_sees_every_tick_under_stock_beats_slug(
    make_rig: Any, pg_url: str, tmp_path: Path
) -> None:
    envelopes = tmp_path / "sentry-envelopes.jsonl"
    rig = make_rig(schedule=CRONS, timezone=ZONE, sentry_envelopes=envelopes)
    _synced_in_the_past(pg_url, CRONS, 125_000)
    worker = rig.worker(ready=False)
    beat_proc = rig.beat()
    outcome = {"nightly-report": "ok", "failing-report": "error"}

    def settled() -> bool:
        seen = _check_ins(envelopes)
        for name, final in outcome.items():
            ticks = _enqueued(rig, name)
            mine = [c for c in seen if c["monitor_slug"] == name]
            if len(ticks) < 2 or len(mine) != 2 * len(ticks):
                return False
            if sum(c["status"] == final for c in mine) != len(ticks):
                return False
        return True

    wait_until(settled, 60, "an in_progress and a final check-in for each tick")
    check_ins = _check_ins(envelopes)
    for name, final in outcome.items():
        stock = _stock_monitor(name, CRONS[name]["task"])
        assert stock == {
            "slug": name,
            "config": {"schedule": {"type": "crontab", "value": "* * * * *"}, "timezone": ZONE},
        }
        ticks = _enqueued(rig, name)
        assert all(t.startswith(f"{name}@") for t in ticks)  # each tick kept its own id
        mine = [c for c in check_ins if c["monitor_slug"] == name]
        started = [c for c in mine if c["status"] == "in_progress"]
        ended = {c["check_in_id"]: c for c in mine if c["status"] == final}
        assert len(started) == len(ticks) == len(ended)
        for check_in in started:  # from beat, then closed by the worker under the same id
            assert check_in["pid"] == beat_proc.proc.pid
            assert check_in["monitor_slug"] == stock["slug"]
            assert check_in["monitor_config"] == stock["config"]
            closing = ended[check_in["check_in_id"]]
            assert closing["pid"] == worker.proc.pid
            assert closing["monitor_config"] == stock["config"]
            assert closing["duration"] is not None and closing["duration"] >= 0
    beat_lines = beat_proc.output()
    assert "celery.beat.Scheduler.apply_entry is wrapped by sentry_sdk" in beat_lines
    assert beat_lines.count("Sending due task nightly-report") == len(
        _enqueued(rig, "nightly-report")
    )
    _dump_for_the_report(
        {"check_ins": check_ins, "ticks": {name: _enqueued(rig, name) for name in outcome}}
    )


def _dump_for_the_report(evidence: dict[str, Any]) -> None:
    """``DURABLE_BEAT_EVIDENCE=<folder>`` keeps the captured check-ins for a reviewer."""
    folder = os.environ.get("DURABLE_BEAT_EVIDENCE")
    if folder:
        import json

        Path(folder, "sentry-check-ins.json").write_text(json.dumps(evidence, indent=1))


def test_one_trace_per_tick_from_beats_publish_to_the_workers_run(
    make_rig: Any, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    schedule = {"every-second": {"task": "procapp.record", "schedule": "@every 1s"}}
    rig = make_rig(schedule=schedule, otel_spans=spans_file)
    worker = rig.worker(ready=False)
    beat_proc = rig.beat()
    rows = rig.wait_rows(3, 45)

    def traced() -> dict[str, dict[str, dict[str, Any]]] | None:
        by_id: dict[str, dict[str, dict[str, Any]]] = {}
        for span in read_jsonl(spans_file):
            task_id = span["attributes"].get("messaging.message.id")
            if task_id is not None:
                by_id.setdefault(task_id, {})[span["name"]] = span
        ran = [r["id"] for r in rows]
        done = all(len(by_id.get(task_id, {})) == 2 for task_id in ran)
        return by_id if done else None

    by_id = wait_until(traced, 30, "a publish span and a run span for each executed tick")
    traces = set()
    for row in rows:
        assert row["id"] == tick_task_id("every-second", row["headers"]["periodic_tick_ms"])
        spans = by_id[row["id"]]
        publish, run = spans["apply_async/procapp.record"], spans["run/procapp.record"]
        assert (publish["kind"], publish["pid"]) == ("PRODUCER", beat_proc.proc.pid)
        assert (run["kind"], run["pid"]) == ("CONSUMER", worker.proc.pid)
        assert run["trace_id"] == publish["trace_id"]
        assert run["parent_id"] == publish["span_id"]
        traces.add(publish["trace_id"])
    assert len(traces) == len(rows)  # one trace per tick
    _dump_spans(by_id, [r["id"] for r in rows])


def _dump_spans(by_id: dict[str, Any], ids: list[str]) -> None:
    folder = os.environ.get("DURABLE_BEAT_EVIDENCE")
    if folder:
        import json

        Path(folder, "otel-spans.json").write_text(
            json.dumps({task_id: by_id[task_id] for task_id in ids}, indent=1)
        )
