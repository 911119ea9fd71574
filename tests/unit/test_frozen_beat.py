"""FrozenBeat (SPEC §11): the real dispatch path on a frozen clock, over the in-memory store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from celery import Celery

from celery_durable_beat.testing import FrozenBeat

pytestmark = pytest.mark.unit


def _app(schedule: dict[str, dict[str, object]], tz: str = "UTC") -> Celery:
    app = Celery("frozen", set_as_current=False)
    app.conf.timezone = tz
    app.conf.beat_schedule = schedule
    return app


@pytest.fixture
def beat_factory() -> Iterator[object]:
    made: list[FrozenBeat] = []

    def make(app: Celery, start: str) -> FrozenBeat:
        beat = FrozenBeat(app, start=start)
        made.append(beat)
        return beat

    yield make
    for beat in made:
        beat.close()


def test_advance_dispatches_in_order(beat_factory) -> None:  # type: ignore[no-untyped-def]
    beat = beat_factory(
        _app({"hourly": {"task": "t", "schedule": "@hourly"}}), "2026-03-07T00:00:00Z"
    )
    ticks = beat.advance("3h")
    assert [t.tick.isoformat() for t in ticks] == [
        "2026-03-07T01:00:00+00:00",
        "2026-03-07T02:00:00+00:00",
        "2026-03-07T03:00:00+00:00",
    ]
    assert ticks[0].task_id == "hourly@2026-03-07T01:00:00Z" and ticks[0].trigger == "auto"
    assert beat.advance("0s") == []
    assert beat.now == datetime(2026, 3, 7, 3, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("skip", ["05:00"]),
        ("run_once", ["01:00"]),
        ("backfill", ["03:00", "04:00", "05:00"]),
    ],
)
def test_missed_policies_after_downtime(beat_factory, policy: str, expected: list[str]) -> None:  # type: ignore[no-untyped-def]
    app = _app({"h": {"task": "t", "schedule": "0 * * * *", "missed": policy, "backfill_max": 3}})
    beat = beat_factory(app, "2026-03-07T00:00:00Z")
    beat.advance("5h", beat_running=False)
    ticks = beat.advance("1s")
    assert [t.tick.strftime("%H:%M") for t in ticks] == expected
    after = beat.advance("1h")
    assert [t.tick.strftime("%H:%M") for t in after] == ["06:00"]


def test_dst_spring_forward_in_new_york(beat_factory) -> None:  # type: ignore[no-untyped-def]
    app = _app({"n": {"task": "t", "schedule": "30 2 * * *"}}, tz="America/New_York")
    beat = beat_factory(app, "2026-03-07T00:00:00Z")
    ticks = beat.advance("3d")
    assert [t.tick.isoformat() for t in ticks] == [
        "2026-03-07T07:30:00+00:00",  # 02:30 EST
        "2026-03-08T07:00:00+00:00",  # 02:30 does not exist: 03:00 EDT
        "2026-03-09T06:30:00+00:00",  # 02:30 EDT
    ]


def test_placeholders_carry_the_planned_instant(beat_factory) -> None:  # type: ignore[no-untyped-def]
    app = _app(
        {
            "p": {
                "task": "t",
                "schedule": "0 9 * * *",
                "kwargs": {"day": "{{scheduled_for}}"},
                "missed": "run_once",
            }
        },
        tz="Europe/Berlin",
    )
    beat = beat_factory(app, "2026-06-01T00:00:00Z")
    beat.advance("2d", beat_running=False)
    (tick,) = beat.advance("1s")
    assert tick.kwargs == {"day": "2026-06-01T09:00:00+02:00"}


def test_bad_duration_is_explained(beat_factory) -> None:  # type: ignore[no-untyped-def]
    beat = beat_factory(_app({}), "2026-01-01T00:00:00Z")
    with pytest.raises(ValueError, match="not understood"):
        beat.advance("3 weeks")


def test_jitter_delays_dispatch_but_loses_no_tick(beat_factory) -> None:  # type: ignore[no-untyped-def]
    app = _app({"j": {"task": "t", "schedule": "@every 60s", "jitter": 120}})
    beat = beat_factory(app, "2026-06-01T00:00:00Z")
    ticks = [t.tick_ms for t in beat.advance("1h")]
    # a jitter above the period is bounded by the gap to the next tick: every tick fires, in
    # order (the last one or two may be dispatched just after the hour)
    assert len(ticks) >= 58
    assert ticks == list(range(ticks[0], ticks[-1] + 1, 60_000))
    assert not [e for e in beat.store.history("j", 100) if e.outcome.value == "skipped"]
