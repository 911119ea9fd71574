"""The kinds of SPEC §18 through the Python surfaces on the in-memory store: ``upsert`` with
``exclude`` and ``start_at``/``end_at``, ``next_ticks``, ``backfill`` under the automatic ids,
and ``FrozenBeat`` to a rule's ``COUNT``. The instants are written out by hand."""

from __future__ import annotations

from datetime import datetime

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat, tick_task_id
from celery_durable_beat.clock import datetime_to_ms
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.testing import FrozenBeat, MemoryStore

pytestmark = pytest.mark.unit

MONDAYS = "RRULE:FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0;BYSECOND=0"


def _beat(now: str, publisher: CapturingPublisher) -> DurableBeat:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(timezone="Europe/Berlin", durable_beat_url="sqlite:///never-opened.sqlite3")
    now_ms = datetime_to_ms(datetime.fromisoformat(now))
    return DurableBeat(app, store=MemoryStore(clock=lambda: now_ms), publisher=publisher)


def test_a_rule_with_exclude_and_a_window_through_upsert_next_and_backfill() -> None:
    publisher = CapturingPublisher()
    beat = _beat("2026-12-20T00:00:00+00:00", publisher)
    entry = {
        "task": "proj.standup",
        "schedule": MONDAYS,
        "exclude": ["2026-12-28"],
        "start_at": "2026-11-20T00:00:00+01:00",
        "end_at": "2027-01-31T00:00:00+01:00",
    }
    assert beat.upsert("standup", entry).value == "created"
    assert beat.upsert("standup", entry).value == "unchanged"
    ticks = [t.tick for t in beat.next_ticks("standup", 10)]
    assert ticks == [  # 2026-12-28 excluded; nothing after end_at
        "2026-12-21T09:00:00+01:00",
        "2027-01-04T09:00:00+01:00",
        "2027-01-11T09:00:00+01:00",
        "2027-01-18T09:00:00+01:00",
        "2027-01-25T09:00:00+01:00",
    ]
    window = (
        datetime.fromisoformat("2026-11-01T00:00:00+01:00"),
        datetime.fromisoformat("2026-12-19T00:00:00+01:00"),
    )
    done = beat.backfill("standup", *window)
    assert [t.tick for t in done.ticks] == [  # from start_at: Nov 23, 30, Dec 7, 14
        "2026-11-23T08:00:00Z",
        "2026-11-30T08:00:00Z",
        "2026-12-07T08:00:00Z",
        "2026-12-14T08:00:00Z",
    ]
    assert [m.task_id for m in publisher.messages] == [
        tick_task_id("standup", t.tick_ms) for t in done.ticks
    ]


def test_a_solar_upsert_shows_its_kind_and_words() -> None:
    beat = _beat("2026-12-04T00:00:00+00:00", CapturingPublisher())
    beat.upsert("lights", {"task": "proj.lights", "schedule": "@solar sunrise 59.437 24.745"})
    (view,) = [v for v in beat.list() if v.name == "lights"]
    assert (view.kind, view.schedule) == ("solar", "@solar sunrise 59.437 24.745")
    detail = beat.get("lights", count=2)
    assert detail.to_json()["description"] == "at sunrise in 59.437, 24.745"
    # PyEphem: 2026-12-04 06:56:48.88-.94 UTC (08:56 in Tallinn), shown in the app's zone
    assert detail.next[0] == "2026-12-04T07:56:48+01:00"


def test_frozen_beat_runs_a_rule_to_its_count_and_then_it_has_ended() -> None:
    app = Celery("proj", set_as_current=False)
    app.conf.timezone = "UTC"
    rule = "DTSTART:20261204T060000\nRRULE:FREQ=HOURLY;INTERVAL=2;COUNT=3"
    app.conf.beat_schedule = {"thrice": {"task": "t", "schedule": rule}}
    with FrozenBeat(app, start="2026-12-04T05:00:00Z") as beat:
        fired = beat.advance("1d")
        assert [t.tick.strftime("%H:%M") for t in fired] == ["06:00", "08:00", "10:00"]
        record = beat.store.get("thrice")
        assert record is not None and record.next_tick_ms is None
