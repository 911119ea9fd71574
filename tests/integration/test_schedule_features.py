"""SPEC §2 and §6 schedule features with a real beat and real workers (PostgreSQL, Redis):
``overlap: buffer_one`` (including a beat killed -9 while a tick is held), ``expires`` behind a
worker outage, and ``pause_on_failure``.

The time-only sides of the same keys (``start_at``, ``end_at``, the ``expires`` instant) are
proven on a frozen clock in ``tests/unit/test_schedule_features.py``.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import create_engine, select

from celery_durable_beat import DurableBeat
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.tables import schedules
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory

pytestmark = pytest.mark.integration


@pytest.fixture
def make_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Any]:
    """Rigs whose workers run ``install(app)``; a beat's lease lives 3 s."""
    rig = partial(ProcessRig, store_url=pg_url, broker_url=redis_url, lease_ttl=3)
    with rig_factory(tmp_path, rig) as make:
        yield make


def _buffered_tick(rig: ProcessRig, name: str) -> int | None:
    engine = create_engine(rig.store_url)
    try:
        with engine.connect() as conn:
            query = select(schedules.c.buffered_tick_ms).where(schedules.c.name == name)
            return conn.execute(query).scalar()
    finally:
        engine.dispose()


def _spans(rig: ProcessRig) -> list[tuple[float, float]]:
    starts = {r["id"]: r["t"] for r in rig.rows("start")}
    ends = {r["id"]: r["t"] for r in rig.rows("end")}
    return sorted((starts[i], ends.get(i, float("inf"))) for i in starts)


def _state(rig: ProcessRig, name: str) -> tuple[str, str | None] | None:
    """The schedule's state and its reason; None before beat's config sync created it."""
    store = SqlStore(rig.store_url)
    try:
        record = store.get(name)
        if record is None:
            return None
        reason = None if record.state_reason is None else record.state_reason.value
        return record.state.value, reason
    finally:
        store.close()


def test_buffer_one_holds_one_tick_and_survives_a_beat_kill(make_rig: Any) -> None:
    rig = make_rig()
    rig.worker("prefork", 3)
    entry = {"task": "procapp.sleepy", "schedule": "@every 1s", "args": [3.0]}
    beat = rig.beat(schedule={"slow": {**entry, "overlap": "buffer_one"}})
    held = wait_until(lambda: _buffered_tick(rig, "slow"), 30, "a tick held by buffer_one")
    beat.signal(signal.SIGKILL)  # killed while a tick is held
    beat.kill()
    second = rig.beat(name="beat2", schedule={"slow": {**entry, "overlap": "buffer_one"}})
    held_id = tick_task_id("slow", held)
    wait_until(lambda: held_id in {r["id"] for r in rig.rows("end")}, 40, "the held tick run")
    wait_until(lambda: len(rig.rows("end")) >= 3, 40, "3 finished runs")
    spans = _spans(rig)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans  # never two at once
    events = rig.history("slow")
    enqueued = [e for e in events if e.outcome.value == "enqueued"]
    held_event = next(e for e in enqueued if e.task_id == held_id)
    assert (
        held_event.lag_ms or 0
    ) > 1000  # published when the previous run ended, with its real lag
    assert any(e.outcome.value == "skipped" and e.reason == "overlap" for e in events)
    assert len({e.task_id for e in enqueued}) == len(enqueued)  # one record per tick
    ran = [r["id"] for r in rig.rows("start")]
    assert len(ran) == len(set(ran))  # nothing executed twice
    assert set(ran) <= {e.task_id for e in enqueued}
    assert second.alive(), second.tail()


def test_expires_next_tick_lets_workers_discard_ticks_they_started_too_late(
    make_rig: Any,
) -> None:
    rig = make_rig()
    entry = {"task": "procapp.record", "schedule": "@every 1s", "expires": "next_tick"}
    rig.beat(schedule={"fresh": entry})
    wait_until(
        lambda: len([e for e in rig.history("fresh") if e.outcome.value == "enqueued"]) >= 3,
        30,
        "3 ticks enqueued while no worker runs",
    )
    rig.worker("solo")
    # The backlog is dropped, not worked through: every tick but the newest had expired.
    expired = wait_until(
        lambda: (
            len(found := [e for e in rig.history("fresh") if e.run_state == "expired"]) >= 2
            and found
        ),
        30,
        "2 expired ticks in history",
    )
    wait_until(rig.rows, 30, "a tick executed once the worker is up")
    ran = {r["id"] for r in rig.rows()}
    assert not ran & {e.task_id for e in expired}  # a discarded tick never ran


def test_pause_on_failure_pauses_after_n_failed_runs_and_resume_clears_the_count(
    make_rig: Any,
) -> None:
    rig = make_rig()
    rig.worker("threads", 2)
    entry = {"task": "procapp.broken", "schedule": "@every 1s", "pause_on_failure": 2}
    rig.beat(schedule={"fragile": entry})
    wait_until(lambda: _state(rig, "fragile") == ("paused", "failures"), 40, "paused: failures")
    events = rig.history("fragile")
    assert any(e.outcome.value == "skipped" and e.reason == "failures" for e in events)
    failed = [e for e in events if e.run_state == "failed"]
    assert len(failed) >= 2
    paused_at = max(e.id for e in events)
    app = Celery("control", broker=rig.broker_url, set_as_current=False)
    app.conf.durable_beat_url = rig.store_url
    with DurableBeat(app) as control:
        assert control.get("fragile").state_reason == "failures"
        assert control.resume("fragile").state_reason is None
    # Resumed, the old failures no longer count: it runs (and fails) twice more first.
    wait_until(lambda: _state(rig, "fragile") == ("paused", "failures"), 40, "paused again")
    again = [e for e in rig.history("fragile") if e.id > paused_at]
    assert len([e for e in again if e.outcome.value == "enqueued"]) >= 2
