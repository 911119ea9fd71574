"""Real `celery beat -S celery_durable_beat.Scheduler` and `celery worker` processes on
PostgreSQL and a Redis broker: what a user runs, end to end."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.schedules.render import tick_isoformat
from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory

pytestmark = pytest.mark.integration


@pytest.fixture
def make_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Any]:
    """Rigs whose worker runs no guard: every delivery executes, so the tests see what beat
    sent. The kill -9 tests turn the guard on (a kill between publish and audit may publish a
    tick twice) and shorten the TTL (the killed beat's lease must lapse before the next leads)."""
    rig = partial(ProcessRig, store_url=pg_url, broker_url=redis_url, guard=False, lease_ttl=30)
    with rig_factory(tmp_path, rig) as make:
        yield make


def every_second(missed: str, **extra: Any) -> dict[str, Any]:
    """One schedule ``s``, ``@every 1s``, with this missed-run policy."""
    return {"s": {"task": "procapp.record", "schedule": "@every 1s", "missed": missed, **extra}}


def test_ticks_execute_with_ids_headers_and_placeholders(make_rig: Any) -> None:
    rig = make_rig(
        schedule={
            "every-second": {
                "task": "procapp.record",
                "schedule": "@every 1s",
                "kwargs": {"at": "{{scheduled_for}}", "ms": "{{scheduled_for_ms}}"},
            }
        }
    )
    rig.worker(ready=False)
    rig.beat()
    rows = rig.wait_rows(3, 45)
    for row in rows:
        tick_ms = row["headers"]["periodic_tick_ms"]
        assert row["id"] == tick_task_id("every-second", tick_ms)
        assert row["headers"]["periodic_schedule"] == "every-second"
        assert row["headers"]["periodic_trigger"] == "auto"
        assert row["headers"]["periodic_task_name"] == "every-second"  # django-celery-results'
        assert row["kwargs"] == {"at": tick_isoformat(tick_ms, "UTC"), "ms": str(tick_ms)}


def _executed(rig: ProcessRig) -> list[int]:
    return [r["headers"]["periodic_tick_ms"] for r in rig.rows()]


def test_restart_continues_with_no_gap_and_no_duplicate(make_rig: Any) -> None:
    rig = make_rig(schedule=every_second("backfill", backfill_max=30))
    rig.worker(ready=False)
    first = rig.beat("beat-a")
    rig.wait_rows(3, 45)
    assert first.stop() == 0, first.output()[-2000:]
    seen = len(rig.rows())
    second = rig.beat("beat-b")
    rig.wait_rows(seen + 4, 45)
    second.stop()
    ticks = _executed(rig)
    assert len(ticks) == len(set(ticks)), "a tick executed twice"
    ordered = sorted(ticks)
    assert ordered == list(range(ordered[0], ordered[-1] + 1, 1000)), "a tick is missing"


def _kill_after_two_ticks(make_rig: Any, missed: str, store: SqlStore) -> tuple[ProcessRig, int]:
    """A beat (guard on, TTL 3 s) killed with SIGKILL after 2 ticks, and 4 s of downtime by the
    store's clock; the rig and the store's time of the kill."""
    rig = make_rig(schedule=every_second(missed), guard=True, lease_ttl=3)
    rig.worker(ready=False)
    beat = rig.beat("beat-a")
    rig.wait_rows(2, 45)
    beat.signal(signal.SIGKILL)
    beat.proc.wait(timeout=10)
    stopped_at = store.now_ms()
    wait_until(lambda: store.now_ms() - stopped_at > 4000, 10, "4 s of downtime")
    return rig, stopped_at


def _missed_records(store: SqlStore) -> list[Any]:
    return wait_until(
        lambda: [e for e in store.history("s", 50) if e.reason == "missed"],
        20,
        "a skipped/missed record",
    )


def test_skip_policy_after_kill_9_records_the_dropped_ticks(make_rig: Any, pg_url: str) -> None:
    with closing(SqlStore(pg_url)) as store:
        rig, _ = _kill_after_two_ticks(make_rig, "skip", store)
        seen = len(rig.rows())
        rig.beat("beat-b")
        rig.wait_rows(seen + 2, 45)
        skipped = _missed_records(store)
    assert skipped[0].detail["count"] >= 3
    ticks = _executed(rig)
    assert len(ticks) == len(set(ticks))


def test_invalid_config_exits_non_zero_listing_every_error(make_rig: Any) -> None:
    rig = make_rig(
        schedule={
            "nightly": {"task": "procapp.record", "schedule": "0 3 * * *", "tz": "Bogota"},
            "broken": {"task": "procapp.record", "schedule": "61 * * * *", "missed": "sometimes"},
        }
    )
    beat = rig.beat()
    code = beat.proc.wait(timeout=60)
    out = beat.output()
    assert code != 0
    assert 'tz "Bogota" is not an IANA zone; use e.g. "America/Bogota"' in out
    assert 'schedule "broken"' in out and "missed" in out and "not a valid cron" in out


def test_run_once_policy_after_kill_9_fires_the_earliest_missed_tick(
    make_rig: Any, pg_url: str
) -> None:
    with closing(SqlStore(pg_url)) as store:
        rig, _ = _kill_after_two_ticks(make_rig, "run_once", store)
        # The earliest missed tick is the one the store still holds: the kill may land after a
        # publish and before its record, and then it is that tick, replayed (the guard runs it
        # once), not the one after it.
        record = store.get("s")
        assert record is not None and record.next_tick_ms is not None
        earliest, killed_epoch = record.next_tick_ms, store.leader_info().epoch
        rig.beat("beat-b")
        fired = wait_until(
            lambda: _fired_after(store, killed_epoch, 2), 45, "two ticks recorded by beat-b"
        )
        dropped = _missed_records(store)
    assert fired[0] == earliest, "run_once fires the earliest missed tick"
    assert fired[1] - fired[0] >= 3000, "the rest of the outage was dropped, not fired"
    assert dropped[0].detail["count"] == (fired[1] - fired[0]) // 1000 - 1
    executed = _executed(rig)
    assert len(executed) == len(set(executed)), "a tick executed twice"


def _fired_after(store: SqlStore, epoch: int, at_least: int) -> list[int]:
    """The ticks recorded ``enqueued`` under a newer epoch than ``epoch``, oldest first (empty
    until there are ``at_least``)."""
    events = store.history("s", 50)
    fired = sorted(e.tick_ms for e in events if e.epoch > epoch and e.outcome.value == "enqueued")
    return fired if len(fired) >= at_least else []
