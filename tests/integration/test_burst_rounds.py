"""A burst through the real beat on PostgreSQL and Redis: each round's settle beside the next
round's claim (``burst.py``, store rule 12), and still every tick once, recorded, advanced.

650 schedules ``@every 1s`` with a batch of 100: every second brings a burst of six full
rounds and a partial one. The beat runs as Celery runs it (``tick()``, sleep what it returns)
for a few seconds; then the Redis queue, the audit and the schedule rows must agree tick for
tick: no tick twice in the queue or the audit, none skipped between a schedule's first and last
recorded tick, and the rows advanced past every recorded tick.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Sequence

import pytest
import redis
from celery import Celery

from celery_durable_beat.scheduler import Scheduler
from celery_durable_beat.store.base import Advance, AuditEvent
from celery_durable_beat.store.sql import SqlStore

pytestmark = pytest.mark.integration

SCHEDULES = 650
BATCH = 100
RUN_S = 3.5
QUEUE = "burst-rounds"


def test_bursts_settle_beside_claims_and_fire_every_tick_once(
    pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DURABLE_BEAT_URL", raising=False)
    app = Celery("bursts", broker=redis_url, set_as_current=False)
    app.conf.update(
        durable_beat_url=pg_url,
        durable_beat_batch_size=BATCH,
        task_default_queue=QUEUE,
        result_expires=None,
        beat_schedule={
            # backfill: a loaded machine that runs a second late fires the late ticks, so the
            # check below proves order and completeness whatever the machine's speed
            f"s{i:03d}": {"task": "proj.noop", "schedule": "@every 1s", "missed": "backfill"}
            for i in range(SCHEDULES)
        },
    )
    scheduler = Scheduler(app, lazy=False)
    store = scheduler.store
    assert isinstance(store, SqlStore) and store.settles_beside_claims
    threads: list[str] = []
    real_settle = store.settle

    def noting_settle(
        events: Sequence[AuditEvent], advances: Sequence[Advance], epoch: int
    ) -> list[bool]:
        threads.append(threading.current_thread().name)
        return real_settle(events, advances, epoch)

    monkeypatch.setattr(store, "settle", noting_settle)
    try:
        deadline = time.monotonic() + RUN_S
        while time.monotonic() < deadline:
            time.sleep(max(0.0, min(float(scheduler.tick()), deadline - time.monotonic())))
        with store._get_engine().connect() as conn:
            audited = conn.exec_driver_sql(
                "SELECT schedule, tick_ms, task_id FROM durable_beat_audit "
                "WHERE outcome = 'enqueued'"
            ).all()
            rows = dict(
                conn.exec_driver_sql("SELECT name, next_tick_ms FROM durable_beat_schedules").all()
            )
    finally:
        scheduler.close()

    client = redis.Redis.from_url(redis_url)
    queued = [json.loads(raw)["headers"]["id"] for raw in client.lrange(QUEUE, 0, -1)]
    client.close()
    assert len(queued) == len(set(queued)), "a tick was published twice"
    assert sorted(queued) == sorted(task_id for _, _, task_id in audited)
    ticks: dict[str, list[int]] = defaultdict(list)
    for schedule, tick_ms, _ in audited:
        ticks[schedule].append(tick_ms)
    assert len(ticks) == SCHEDULES, "a schedule never fired"
    for schedule, fired in ticks.items():
        fired.sort()
        assert fired == list(range(fired[0], fired[-1] + 1, 1000)), f"{schedule} skipped a tick"
        assert rows[schedule] > fired[-1], f"{schedule} was not advanced past its last tick"
    # Full rounds settled on the settling thread; the partial last round in beat's own.
    assert any(name.startswith("durable-beat-settle") for name in threads)
    assert any(name == threading.current_thread().name for name in threads)
