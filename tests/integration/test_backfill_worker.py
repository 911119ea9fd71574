"""Backfill on demand with real processes (SPEC §15, issue 28 item 3).

A real ``celery beat`` runs an every-second schedule on PostgreSQL while a real worker with
``install(app)`` (the test app, ``tests/support/procapp.py``) executes its ticks over Redis;
then beat stops, and ticks go missing. A backfill of a window that holds ticks that ran, ticks
from before the schedule existed and the ticks beat missed executes exactly the missing ones,
each once, under the id its automatic tick has; a second identical backfill sends nothing; and
a copy of a tick that ran, sent by hand with the backfill header, is refused by the worker's
guard.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.clock import ms_to_datetime
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Outcome, Trigger
from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory, tick_headers

pytestmark = pytest.mark.integration

NAME = "every-second"
SCHEDULE = {NAME: {"task": "procapp.record", "schedule": "@every 1s"}}


@pytest.fixture
def rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[ProcessRig]:
    with rig_factory(tmp_path, ProcessRig) as make:
        yield make(pg_url, redis_url, schedule=SCHEDULE, poll=0.2)


@pytest.fixture
def control(rig: ProcessRig) -> Iterator[DurableBeat]:
    app = Celery("operator", broker=rig.broker_url, set_as_current=False)
    app.conf.update(durable_beat_url=rig.store_url, timezone="UTC")
    with DurableBeat(app, actor="cli:test@rig") as beat:
        yield beat
    app.close()


def store_now(rig: ProcessRig) -> int:
    store = SqlStore(rig.store_url)
    try:
        return store.now_ms()
    finally:
        store.close()


def ran(rig: ProcessRig) -> Counter[str]:
    """How many times each task id executed on the worker."""
    return Counter(r["id"] for r in rig.rows("run"))


def auto_enqueued(rig: ProcessRig) -> list[Any]:
    return [
        e for e in rig.history(NAME) if e.outcome is Outcome.ENQUEUED and e.trigger is Trigger.AUTO
    ]


@pytest.mark.timeout(120)
def test_a_backfill_runs_only_the_missing_ticks_and_a_second_one_runs_nothing(
    rig: ProcessRig, control: DurableBeat
) -> None:
    rig.worker()
    beat = rig.beat()
    wait_until(lambda: len(rig.rows("run")) >= 3, 30, "three automatic ticks ran")
    beat.stop()
    auto = sorted(e.tick_ms for e in auto_enqueued(rig))
    wait_until(lambda: len(ran(rig)) >= len(auto), 30, "every enqueued tick ran")
    wait_until(lambda: store_now(rig) >= auto[-1] + 4_000, 10, "four ticks missed")

    start = ms_to_datetime(auto[0]) - timedelta(seconds=2)  # before the schedule existed
    end = ms_to_datetime(store_now(rig))
    dry = control.backfill(NAME, start, end, dry_run=True)
    missing = [t.task_id for t in dry.ticks]
    assert dry.already_enqueued == len(auto) and len(missing) >= 6
    assert set(missing).isdisjoint(tick_task_id(NAME, t) for t in auto)
    assert ran(rig).keys().isdisjoint(missing)

    done = control.backfill(NAME, start, end, reason="catch up after the outage")
    assert [t.task_id for t in done.ticks] == missing
    wait_until(lambda: set(missing) <= ran(rig).keys(), 30, "the backfilled ticks ran")
    wait_until(rig.drained, 10, "the broker drained")
    counts = ran(rig)
    assert [task_id for task_id, n in counts.items() if n > 1] == []
    assert set(counts) == {tick_task_id(NAME, t) for t in auto} | set(missing)
    backfilled = {r["id"]: r for r in rig.rows("run") if r["id"] in set(missing)}
    assert {r["trigger"] for r in backfilled.values()} == {"backfill"}
    assert all(tick_task_id(NAME, r["tick_ms"]) == i for i, r in backfilled.items())
    ticks = [r["tick_ms"] for r in rig.rows("run") if r["id"] in set(missing)]
    assert ticks == sorted(ticks)  # oldest first, one worker, one process

    again = control.backfill(NAME, start, end)
    assert (again.ticks, again.already_enqueued) == ((), dry.occurrences)
    receipts = len(rig.receipts())
    copy = auto[0]  # a tick that ran, sent again by hand with the backfill header
    rig.send("procapp.record", tick_task_id(NAME, copy), tick_headers(NAME, copy, "backfill"))
    wait_until(lambda: len(rig.receipts()) > receipts, 30, "the copy delivered")
    wait_until(rig.drained, 10, "the broker drained")
    assert ran(rig) == counts  # the guard refused the copy; nothing else ran

    (newest, *_) = control.actions(NAME).actions
    assert (newest.actor, newest.action, newest.reason) == (
        "cli:test@rig",
        "backfill",
        "catch up after the outage",
    )
    assert datetime.fromisoformat(newest.at.replace("Z", "+00:00")) >= end - timedelta(seconds=5)
