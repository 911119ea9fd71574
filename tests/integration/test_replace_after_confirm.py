"""``replace`` revokes only after the new tick is safe (SPEC §6, issue #10 item 1).

A real prefork worker runs the previous tick of a ``replace`` schedule. The next round cannot
publish the new tick — its broker is unreachable — while the revoke broadcast would still reach
the worker through the gate's own app. The running tick must be left alone and complete
``succeeded``: a revoke is sent only for a tick whose publish was confirmed and whose
``enqueued`` record committed, never for one that did not reach the broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Definition, OverlapPolicy, Source
from celery_durable_beat.publish.celery_publisher import CeleryPublisher
from celery_durable_beat.runs.base import RunState
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.wiring import make_gate
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory

pytestmark = pytest.mark.integration

EVERY_MS = 2_000
RUN_S = 4
EPOCH = 1
UNREACHABLE = "redis://127.0.0.1:1/0"
"""A broker nothing listens on: the new tick's publish fails for real."""


@pytest.fixture
def rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[ProcessRig]:
    with rig_factory(tmp_path, ProcessRig) as make:
        yield make(pg_url, redis_url)


@pytest.mark.timeout(120)
def test_replace_leaves_the_running_tick_alone_when_the_new_tick_is_not_published(
    rig: ProcessRig, pg_url: str, redis_url: str
) -> None:
    rig.worker("prefork", 2)
    store = SqlStore(pg_url)
    store.register_epoch(EPOCH)
    definition = Definition(
        name="long",
        task="procapp.sleepy",
        spec=IntervalSpec(EVERY_MS),
        args=(RUN_S,),
        overlap=OverlapPolicy.REPLACE,
    )
    now = store.now_ms()
    first = now - now % EVERY_MS
    store.upsert(definition, Source.CONFIG, first, now)
    app = Celery("beat", broker=redis_url, set_as_current=False)
    app.conf.durable_beat_url = pg_url
    settings = Settings.from_conf(app.conf)
    gate = make_gate(app, settings, store)  # the round gate, as beat builds it
    cut_off = Celery("beat-cut-off", broker=UNREACHABLE, set_as_current=False)
    try:
        Dispatcher(store, CeleryPublisher(app), gate=gate).run_round(now, EPOCH)
        running = tick_task_id("long", first)
        wait_until(lambda: rig.state(running) is RunState.STARTED, 30, "the first tick to start")

        later = max(store.now_ms(), first + EVERY_MS)
        stats = Dispatcher(store, CeleryPublisher(cut_off), gate=gate).run_round(later, EPOCH)
        assert stats.broker_unavailable
        [failed] = [e for e in stats.events if e.task_id == tick_task_id("long", first + EVERY_MS)]
        assert failed.outcome.value == "failed"

        wait_until(lambda: rig.rows("end"), 30, "the running tick to finish")
        # Its run state is committed by the worker's background flusher after the body's row.
        wait_until(lambda: rig.state(running) is RunState.SUCCEEDED, 10, "its end recorded")
        assert [r["id"] for r in rig.rows("end")] == [running]
    finally:
        gate.close()
        cut_off.close()
        app.close()
        store.close()
