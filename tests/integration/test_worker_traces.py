"""What a tick leaves in the user's world, with real worker processes (SPEC §6):

- a duplicate delivery the guard refuses leaves no trace: no ``task_prerun``/``task_postrun``,
  no result-backend state written over the first run's ``SUCCESS`` (``task_track_started``);
- a tick whose task no worker knows is recorded ``unknown_task``, and K of them in a row
  quarantine the schedule (SPEC §4), with a real beat;
- the tick of a schedule whose name is long is stored by Celery's database result backend, whose
  ``task_id`` column is 155 characters wide (SPEC §4's bound), with a real beat.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat.ids import TASK_ID_MAX, schedule_key, tick_task_id
from celery_durable_beat.model import Action, ScheduleState
from celery_durable_beat.runs.base import RunState
from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory, tick_headers

pytestmark = pytest.mark.integration

T0 = 1_780_000_000_000


@pytest.fixture
def make_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Any]:
    """Rigs whose workers run ``install(app)`` (claims in the broker's Redis)."""
    rig = partial(ProcessRig, store_url=pg_url, broker_url=redis_url, lease_ttl=3)
    with rig_factory(tmp_path, rig) as make:
        yield make


def _result_state(backend_url: str, task_id: str) -> str:
    app = Celery("reader", backend=backend_url, set_as_current=False)
    try:
        return str(app.AsyncResult(task_id).state)
    finally:
        app.close()


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_refused_duplicate_leaves_no_trace(make_rig: Any, redis_url: str, pool: str) -> None:
    rig = make_rig(result_backend=redis_url)
    worker = rig.worker(pool, 2)
    task_id = tick_task_id("Traced", T0)
    rig.send("procapp.record", task_id, tick_headers("Traced", T0))
    wait_until(lambda: rig.state(task_id) is RunState.SUCCEEDED, 30, "the first run succeeded")
    wait_until(lambda: rig.signals("task_postrun"), 10, "the first run's task_postrun")
    assert _result_state(redis_url, task_id) == "SUCCESS"

    rig.send("procapp.record", task_id, tick_headers("Traced", T0))  # a duplicate delivery
    worker.wait_action(Action.DUPLICATE_REFUSED.value, 30)
    wait_until(rig.drained, 10, "the duplicate acknowledged")

    assert len(rig.rows("run")) == 1
    assert _result_state(redis_url, task_id) == "SUCCESS"  # not STARTED over SUCCESS
    assert [s["id"] for s in rig.signals("task_prerun")] == [task_id]
    assert [s["id"] for s in rig.signals("task_postrun")] == [task_id]
    assert rig.state(task_id) is RunState.SUCCEEDED


def _schedule_state(url: str, name: str) -> ScheduleState | None:
    store = SqlStore(url)
    try:
        found = store.get(name)
    finally:
        store.close()
    return None if found is None else found.state


def test_ticks_of_a_task_no_worker_knows_quarantine_the_schedule(make_rig: Any) -> None:
    quarantine_after = 3
    rig = make_rig(quarantine_after=quarantine_after)
    rig.worker("solo")
    schedule = {"task": "procapp.no_such_task", "schedule": "@every 1s"}
    rig.beat(schedule={"misspelt": schedule})
    wait_until(
        lambda: _schedule_state(rig.store_url, "misspelt") is ScheduleState.QUARANTINED,
        60,
        "the schedule quarantined",
    )
    events = rig.history("misspelt")
    enqueued = [e for e in events if e.outcome.value == "enqueued"]
    assert len(enqueued) >= quarantine_after
    wait_until(
        lambda: all(
            e.run_state == "unknown_task"
            for e in rig.history("misspelt")
            if e.outcome.value == "enqueued"
        ),
        10,
        "every enqueued tick recorded unknown_task",
    )
    newest = events[0]
    assert (newest.outcome.value, newest.reason) == ("skipped", "quarantined")
    rig.assert_all_alive()


def test_a_long_named_schedules_tick_is_stored_by_celerys_database_result_backend(
    make_rig: Any, pg_url: str
) -> None:
    name = "Quarterly " + "revenue-report-" * 11 + "final"  # 180 characters; a space: a digest
    assert len(name) == 180
    assert len(f"{schedule_key(name)}@2026-11-30T03:00:00Z") > TASK_ID_MAX  # uncut, it would fail
    backend = f"db+{pg_url}"  # celery.backends.database: task_id VARCHAR(155)
    rig = make_rig(result_backend=backend)
    rig.worker("solo")  # the pool the issue saw die of a longer id ("Unrecoverable error")
    rig.beat(schedule={name: {"task": "procapp.echo", "schedule": "@every 1s"}})
    first = wait_until(
        lambda: next((e for e in rig.history(name) if e.outcome.value == "enqueued"), None),
        60,
        "a tick of the long-named schedule enqueued",
    )
    assert first.task_id == tick_task_id(name, first.tick_ms) and len(first.task_id) <= 155
    reader = Celery("reader", backend=backend, set_as_current=False)
    try:
        assert reader.AsyncResult(first.task_id).get(timeout=60) == first.task_id
        print(f"stored and fetched: {first.task_id} ({len(first.task_id)} characters)")
    finally:
        reader.close()
    wait_until(lambda: rig.state(first.task_id) is RunState.SUCCEEDED, 30, "its run recorded")
    rig.assert_all_alive()
