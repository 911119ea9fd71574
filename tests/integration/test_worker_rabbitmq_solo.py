"""A ``-P solo`` worker with ``install(app)`` drains a RabbitMQ queue without stalling.

Found by the chaos restarts (docs/guarantees.md): such a worker was fed about ten messages, then
nothing for 10 s, over and over, while messages waited in the queue. The cause is Kombu's event
loop, which polled while the last task's ack waited in its queue (``worker/loopwake.py``); a
worker without ``install(app)`` has it too, as a race, so it is no reference here.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from celery_durable_beat.ids import tick_task_id
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory, tick_headers

pytestmark = pytest.mark.integration

T0 = 1_780_000_000_000
TICKS = 400
DEADLINE_S = 60.0
"""From the worker's start: generous for its boot and 400 ticks on a loaded 2-core machine
(~10 s)."""
MAX_PAUSE_S = 4.0
"""The longest wait between two runs in a row: a stall is the loop's 10 s poll. Stalls were a
race (one to ten per 200 ticks), so the test looks at every pause, not only the total time."""


@pytest.fixture
def rig(tmp_path: Path, pg_url: str, redis_url: str, amqp_url: str) -> Iterator[ProcessRig]:
    with rig_factory(tmp_path, ProcessRig) as make:
        queue = f"solo-{uuid.uuid4().hex[:8]}"
        yield make(pg_url, amqp_url, queue=queue, lease_url=redis_url, run_ttl=30)


def publish_ticks(rig: ProcessRig, name: str, count: int) -> list[str]:
    """``count`` ticks of one schedule on one connection (``rig.send`` opens one per message)."""
    app = Celery("sender", broker=rig.broker_url, set_as_current=False)
    app.conf.task_default_queue = rig.queue
    ids = []
    try:
        with app.producer_or_acquire() as producer:
            for i in range(count):
                tick_ms = T0 + i * 1000
                task_id = tick_task_id(name, tick_ms)
                app.send_task(
                    "procapp.record",
                    task_id=task_id,
                    headers=tick_headers(name, tick_ms),
                    producer=producer,
                )
                ids.append(task_id)
    finally:
        app.close()
    return ids


def test_solo_worker_drains_ticks_without_stalling(rig: ProcessRig) -> None:
    name = f"solo-{uuid.uuid4().hex[:6]}"
    ids = publish_ticks(rig, name, TICKS)
    worker = rig.worker("solo", 1, ready=False)
    wait_until(lambda: len(rig.rows("run")) >= TICKS, DEADLINE_S, f"{TICKS} ticks run")
    rows = rig.rows("run")
    assert sorted(r["id"] for r in rows) == sorted(ids)  # each once
    times = sorted(float(r["t"]) for r in rows)
    pauses = [round(b - a, 1) for a, b in itertools.pairwise(times) if b - a > MAX_PAUSE_S]
    assert not pauses, f"the worker stalled between runs: {pauses} s"
    wait_until(rig.drained, 10, "the queue drained")
    assert worker.alive(), worker.tail()
