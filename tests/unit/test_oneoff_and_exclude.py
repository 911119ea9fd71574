"""One-off ticks (``@at``) and exclusion dates (``exclude``), SPEC §15, in the pure core and on
FrozenBeat: parsing, the occurrence engine, the planner, validation, the stored JSON, and the
real dispatch path on a frozen clock (which must agree with ``next``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.model import Definition, MissedPolicy, Outcome, Reason, Source
from celery_durable_beat.policy import first_tick, plan, plan_schedule, ticks_after, unfired_at
from celery_durable_beat.schedules import next_tick, parse_schedule, ticks_between
from celery_durable_beat.schedules.describe import describe, describe_exclude
from celery_durable_beat.schedules.occurrences import ENDED_MS, excluded
from celery_durable_beat.schedules.spec import (
    EXCLUDE_MAX,
    AtSpec,
    CronSpec,
    ExcludedSpec,
    Exclusions,
    IntervalSpec,
    SpecError,
    spec_from_json,
    spec_to_json,
)
from celery_durable_beat.schedules.validate import EntryDefaults, validate_entry
from celery_durable_beat.store.rules import decide_upsert
from celery_durable_beat.testing import FrozenBeat, MemoryStore

from ._support import ms

pytestmark = pytest.mark.unit

HOUR, DAY = 3_600_000, 86_400_000
AT = "2026-12-24T18:00:00+01:00"
AT_MS = ms(AT)


def _def(entry: dict[str, Any], tz: str = "UTC") -> Definition:
    return validate_entry("s", {"task": "t", **entry}, EntryDefaults(tz=tz))


def _problems(entry: dict[str, Any], tz: str = "UTC") -> list[str]:
    with pytest.raises(ConfigError) as raised:
        _def(entry, tz)
    return [f"{p.field}: {p.problem}" for p in raised.value.problems]


def _local(ticks: list[int], tz: str) -> list[str]:
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(tz)
    return [datetime.fromtimestamp(t / 1000, zone).isoformat() for t in ticks]


# -- @at: parsing and the engine -----------------------------------------------------------------
def test_at_text_and_aware_datetime_parse_to_one_instant_shown_in_the_zone() -> None:
    from_text = parse_schedule(f"@at {AT}", "Europe/Berlin").spec
    moment = datetime(2026, 12, 24, 17, tzinfo=timezone.utc)
    from_datetime = parse_schedule(moment, "Europe/Berlin").spec
    assert from_text == from_datetime == AtSpec(AT_MS, "Europe/Berlin")
    assert from_text.text() == f"@at {AT}"
    assert parse_schedule(from_text.text(), "Europe/Berlin").spec == from_text  # round trip
    assert AtSpec(AT_MS + 250, "UTC").text() == "@at 2026-12-24T17:00:00.250+00:00"
    assert spec_from_json(spec_to_json(from_text)) == from_text
    assert describe(from_text) == f"once, at {AT} (Europe/Berlin)"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("@at 2026-12-24T18:00:00", "has no UTC offset"),
        (datetime(2026, 12, 24, 18), "has no UTC offset"),
        ("@at tomorrow", "is not an ISO 8601 instant"),
        ("CRON_TZ=Europe/Berlin @at 2026-12-24T18:00:00+01:00", "remove CRON_TZ="),
    ],
)
def test_at_refusals_say_what_to_write(value: object, fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        parse_schedule(value)


def test_at_has_one_tick_and_then_has_ended() -> None:
    spec = AtSpec(AT_MS)
    assert next_tick(spec, AT_MS - 1) == AT_MS
    assert next_tick(spec, AT_MS) == ENDED_MS
    assert ticks_between(spec, 0, AT_MS + DAY) == [AT_MS]
    assert ticks_between(spec, AT_MS, AT_MS + DAY) == []


# -- @at: the planner and its missed policies ----------------------------------------------------
@pytest.mark.parametrize("missed", [MissedPolicy.SKIP, MissedPolicy.RUN_ONCE])
def test_a_late_at_fires_once_late_then_nothing(missed: MissedPolicy) -> None:
    done = plan(AtSpec(AT_MS), AT_MS, AT_MS + 5 * HOUR, missed)
    assert (done.fire, done.next_tick_ms, done.dropped) == ((AT_MS,), None, ())


def test_max_lateness_may_skip_the_one_tick() -> None:
    done = plan(AtSpec(AT_MS), AT_MS, AT_MS + HOUR, MissedPolicy.SKIP, max_lateness_ms=60_000)
    assert done.fire == () and done.next_tick_ms is None
    (dropped,) = done.dropped
    assert (dropped.reason, dropped.count, dropped.first_ms) == (Reason.TOO_LATE, 1, AT_MS)


def test_an_at_in_the_future_is_planned_and_one_already_past_is_unfired() -> None:
    future = _def({"schedule": f"@at {AT}"})
    assert first_tick(future, AT_MS - DAY) == AT_MS
    assert ticks_after(future, AT_MS - DAY, 5) == [AT_MS]
    assert unfired_at(future, AT_MS) is None
    assert first_tick(future, AT_MS) is None  # stored at its instant: already past
    assert unfired_at(future, None) == AT_MS
    # outside start_at / end_at it is no occurrence at all, so not missed either
    after_end = _def({"schedule": f"@at {AT}", "end_at": "2026-12-01T00:00:00+00:00"})
    before_start = _def({"schedule": f"@at {AT}", "start_at": "2027-01-01T00:00:00+00:00"})
    assert unfired_at(after_end, None) is None and unfired_at(before_start, None) is None
    assert unfired_at(_def({"schedule": "@hourly"}), None) is None


def test_creating_a_past_at_records_one_missed_skip_and_an_update_none() -> None:
    past = _def({"schedule": f"@at {AT}"})
    created = decide_upsert(None, past, Source.API, None)
    assert created.dropped is not None
    event = created.dropped
    assert (event.outcome, event.reason, event.tick_ms) == (Outcome.SKIPPED, "missed", AT_MS)
    assert decide_upsert(None, past, Source.API, AT_MS).dropped is None  # still to come
    store = MemoryStore(clock=lambda: AT_MS + DAY)
    try:
        store.upsert(past, Source.API, None, AT_MS + DAY)
        store.upsert(past, Source.API, None, AT_MS + DAY)  # unchanged: nothing more
        history = store.history("s", 10)
        assert [(e.outcome, e.reason, e.tick_ms) for e in history] == [
            (Outcome.SKIPPED, "missed", AT_MS)
        ]
        record = store.get("s")
        assert record is not None and record.next_tick_ms is None
    finally:
        store.close()


def test_at_validation_bounds_the_instant_and_refuses_exclude() -> None:
    assert _def({"schedule": f"@at {AT}", "tz": "America/Bogota"}).spec == AtSpec(
        AT_MS, "America/Bogota"
    )
    assert _problems({"schedule": "@at 1899-12-31T23:00:00+00:00"}) == [
        "schedule: schedule @at 1899-12-31T23:00:00+00:00 is before year 1900 in UTC; "
        "give an instant in years 1900-9999"
    ]
    (far,) = _problems({"schedule": "@at 9999-12-31T20:00:00+00:00", "tz": "Pacific/Kiritimati"})
    assert "past year 9999 in Pacific/Kiritimati" in far
    (refused,) = _problems({"schedule": f"@at {AT}", "exclude": ["2026-12-24"]})
    assert refused.startswith("exclude: an @at schedule fires once")
    (bad_tz,) = _problems({"schedule": f"@at {AT}", "tz": "Bogota"})
    assert 'use e.g. "America/Bogota"' in bad_tz


# -- exclusion dates -----------------------------------------------------------------------------
def test_a_date_far_from_utc_is_read_in_the_zone_kiritimati() -> None:
    # 09:00 on 2026-12-25 in Kiritimati (UTC+14) is 19:00 UTC on the 24th: a UTC reading of
    # the date would exclude the wrong tick
    d = _def({"schedule": "0 9 * * *", "tz": "Pacific/Kiritimati", "exclude": ["2026-12-25"]})
    ticks = ticks_after(d, ms("2026-12-23T00:00:00+00:00"), 3)
    assert _local(ticks, "Pacific/Kiritimati") == [
        "2026-12-24T09:00:00+14:00",
        "2026-12-26T09:00:00+14:00",
        "2026-12-27T09:00:00+14:00",
    ]


def test_an_interval_reads_dates_in_the_app_zone_pago_pago() -> None:
    d = _def(
        {"schedule": "@every 12h", "exclude": [{"from": "2026-07-04", "to": "2026-07-05"}]},
        tz="Pacific/Pago_Pago",
    )
    assert d.exclude is not None and d.exclude.tz == "Pacific/Pago_Pago"
    ticks = ticks_after(d, ms("2026-07-03T00:00:00-11:00"), 4)
    assert _local(ticks, "Pacific/Pago_Pago") == [
        "2026-07-03T01:00:00-11:00",  # 12:00 UTC
        "2026-07-03T13:00:00-11:00",  # 00:00 UTC on the 4th: still the 3rd here
        "2026-07-06T01:00:00-11:00",  # the 4th and 5th (Pago Pago dates) are skipped
        "2026-07-06T13:00:00-11:00",
    ]


def test_a_dst_change_date_is_excluded_whole_new_york() -> None:
    hourly = _def({"schedule": "0 * * * *", "tz": "America/New_York", "exclude": ["2026-03-08"]})
    ticks = ticks_after(hourly, ms("2026-03-07T22:30:00-05:00"), 3)
    assert _local(ticks, "America/New_York") == [
        "2026-03-07T23:00:00-05:00",
        "2026-03-09T00:00:00-04:00",  # all 23 hours of the short day skipped
        "2026-03-09T01:00:00-04:00",
    ]
    # the gap tick of "30 2" (fired at 03:00 EDT on the 8th) is excluded with its date
    gap = _def({"schedule": "30 2 * * *", "tz": "America/New_York", "exclude": ["2026-03-08"]})
    ticks = ticks_after(gap, ms("2026-03-07T00:00:00-05:00"), 2)
    assert _local(ticks, "America/New_York") == [
        "2026-03-07T02:30:00-05:00",
        "2026-03-09T02:30:00-04:00",
    ]
    # fall back: the long day (25 hours) is excluded whole too
    fall = _def({"schedule": "*/30 * * * *", "tz": "America/New_York", "exclude": ["2026-11-01"]})
    ticks = ticks_after(fall, ms("2026-10-31T23:45:00-04:00"), 1)
    assert _local(ticks, "America/New_York") == ["2026-11-02T00:00:00-05:00"]


def test_overlapping_and_adjacent_spans_merge_and_each_is_passed_once() -> None:
    spans = (
        (date(2027, 1, 2), date(2027, 1, 4)),
        (date(2027, 1, 1), date(2027, 1, 1)),
        (date(2027, 1, 3), date(2027, 1, 6)),
        (date(2026, 12, 25), date(2026, 12, 25)),
    )
    exclusions = Exclusions("UTC", spans)
    assert exclusions.merged == (
        (date(2026, 12, 25).toordinal(),) * 2,
        (date(2027, 1, 1).toordinal(), date(2027, 1, 6).toordinal()),
    )
    spec = ExcludedSpec(parse_schedule("@daily").spec, exclusions)  # type: ignore[arg-type]
    assert next_tick(spec, ms("2026-12-31T12:00:00+00:00")) == ms("2027-01-07T00:00:00+00:00")
    assert excluded(exclusions, ms("2027-01-06T23:59:59+00:00"))
    assert not excluded(exclusions, ms("2027-01-07T00:00:00+00:00"))
    assert exclusions.to_json() == [
        {"from": "2027-01-02", "to": "2027-01-04"},
        "2027-01-01",
        {"from": "2027-01-03", "to": "2027-01-06"},
        "2026-12-25",
    ]


def test_excluded_ticks_are_not_missed_ticks_either() -> None:
    d = _def({"schedule": "@daily", "exclude": [{"from": "2026-01-02", "to": "2026-01-04"}]})
    first = ms("2026-01-01T00:00:00+00:00")
    done = plan_schedule("s", d, first, ms("2026-01-06T12:00:00+00:00"))
    assert done.fire == (ms("2026-01-06T00:00:00+00:00"),)
    (dropped,) = done.dropped
    assert (dropped.count, dropped.first_ms, dropped.last_ms) == (
        2,
        first,
        ms("2026-01-05T00:00:00+00:00"),
    )
    assert done.next_tick_ms == ms("2026-01-07T00:00:00+00:00")


@settings(max_examples=40, deadline=None, database=None)
@given(
    every_min=st.integers(1, 24 * 60),
    start_day=st.integers(0, 360),
    days=st.lists(st.integers(0, 400), min_size=1, max_size=30),
    tz=st.sampled_from(["UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Europe/Berlin"]),
)
def test_exclusion_is_the_base_ticks_minus_excluded_dates(
    every_min: int, start_day: int, days: list[int], tz: str
) -> None:
    """Property: the excluded timeline is exactly the base timeline with the excluded dates
    filtered out, strictly increasing, over a window of several excluded spans."""
    base = IntervalSpec(every_min * 60_000)
    day0 = date(2026, 1, 1)
    exclusions = Exclusions(tz, tuple((day0 + timedelta(d),) * 2 for d in days))
    spec = ExcludedSpec(base, exclusions)
    after = ms("2026-01-01T00:00:00+00:00") + start_day * DAY
    until = after + 20 * DAY
    first = next_tick(base, after)
    every = range(first, until + 1, base.every_ms)
    expected = [t for t in every if not excluded(exclusions, t)]
    assert ticks_between(spec, after, until) == expected[:1000]


def test_exclusions_are_stored_only_when_given_and_read_back() -> None:
    plain = _def({"schedule": "0 3 * * *"})
    assert "exclude" not in plain.to_json() and plain.timeline is plain.spec  # fast path kept
    d = _def(
        {
            "schedule": "0 3 * * *",
            "tz": "Europe/Berlin",
            "exclude": [
                "2026-12-25",
                date(2026, 12, 26),
                {"from": "2027-01-01", "to": "2027-01-03"},
            ],
        }
    )
    assert d.to_json()["exclude"] == {
        "tz": "Europe/Berlin",
        "dates": ["2026-12-25", "2026-12-26", {"from": "2027-01-01", "to": "2027-01-03"}],
    }
    again = Definition.from_json("s", d.to_json())
    assert again == d and again.definition_hash() == d.definition_hash()
    assert isinstance(again.timeline, ExcludedSpec)
    assert describe_exclude(d.exclude) == (
        ", except on 2026-12-25, 2026-12-26, 2027-01-01 to 2027-01-03 (Europe/Berlin)"
    )
    many = Exclusions("UTC", tuple((date(2030, 1, 1) + timedelta(2 * i),) * 2 for i in range(7)))
    assert describe_exclude(many).endswith(", 2 more (UTC)")
    assert describe_exclude(None) == ""


def test_exclude_refusals_name_the_item_and_the_fix() -> None:
    got = _problems(
        {
            "schedule": "@every 1h",
            "exclude": [
                "2026-13-01",
                {"from": "2026-01-05", "to": "2026-01-01"},
                5,
                {"from": "2026-01-01"},
                datetime(2026, 1, 1, tzinfo=timezone.utc),
                "1899-12-31",
            ],
        }
    )
    assert got == [
        "exclude: exclude[0] '2026-13-01' is not a date; give \"YYYY-MM-DD\" or "
        '{"from": "YYYY-MM-DD", "to": "YYYY-MM-DD"}',
        "exclude: exclude[1] ends (2026-01-01) before it starts (2026-01-05); swap from and to",
        'exclude: exclude[2] 5 is not a date; give "YYYY-MM-DD" or '
        '{"from": "YYYY-MM-DD", "to": "YYYY-MM-DD"}',
        'exclude: exclude[3] has the keys from; a range has exactly "from" and "to"',
        'exclude: exclude[4] is a datetime; give the date only, give "YYYY-MM-DD" or '
        '{"from": "YYYY-MM-DD", "to": "YYYY-MM-DD"}',
        "exclude: exclude[5] 1899-12-31 is outside years 1900-9999",
    ]
    (too_many,) = _problems({"schedule": "@daily", "exclude": ["2026-01-01"] * (EXCLUDE_MAX + 1)})
    assert too_many.startswith("exclude: exclude holds 1001 dates or ranges, more than 1000;")
    (not_list,) = _problems({"schedule": "@daily", "exclude": "2026-12-25"})
    assert not_list.startswith("exclude: exclude is a str; give a list")
    assert _def({"schedule": "@daily", "exclude": ["2026-01-01"] * EXCLUDE_MAX}).exclude


def test_exclusion_without_a_valid_schedule_reports_only_the_schedule() -> None:
    assert _problems({"schedule": "61 * * * *", "exclude": ["2026-01-01"]}) == [
        "schedule: '61 * * * *' is not a valid cron expression; check each field's range"
    ]


def test_the_search_is_bounded_by_the_spans() -> None:
    """A thousand spans, every one holding the base's next tick: one pass each, then found."""
    spans = tuple((date(2026, 1, 1) + timedelta(2 * i),) * 2 for i in range(EXCLUDE_MAX))
    spec = ExcludedSpec(CronSpec(("0", "0", "*", "*", "*")), Exclusions("UTC", spans))
    after = ms("2025-12-31T12:00:00+00:00")
    assert next_tick(spec, after) == ms("2026-01-02T00:00:00+00:00")
    every_day = tuple((date(2026, 1, 1) + timedelta(i),) * 2 for i in range(EXCLUDE_MAX))
    dense = ExcludedSpec(CronSpec(("0", "0", "*", "*", "*")), Exclusions("UTC", every_day))
    assert next_tick(dense, after) == ms("2028-09-27T00:00:00+00:00")  # merged: one pass


# -- FrozenBeat: the real dispatch path ----------------------------------------------------------
def _app(schedule: dict[str, dict[str, Any]], tz: str = "UTC") -> Celery:
    app = Celery("frozen", set_as_current=False)
    app.conf.timezone = tz
    app.conf.beat_schedule = schedule
    return app


@pytest.fixture
def frozen() -> Iterator[Any]:
    made: list[FrozenBeat] = []

    def make(app: Celery, start: str) -> FrozenBeat:
        made.append(FrozenBeat(app, start=start))
        return made[-1]

    yield make
    for beat in made:
        beat.close()


def test_frozen_beat_fires_an_at_once_under_its_id(frozen: Any) -> None:
    beat = frozen(_app({"launch": {"task": "t", "schedule": f"@at {AT}"}}), "2026-12-24T00:00:00Z")
    (tick,) = beat.advance("3d")
    assert tick.task_id == "launch@2026-12-24T17:00:00Z"
    assert tick.tick_ms == AT_MS and tick.trigger == "auto"
    record = beat.store.get("launch")
    assert record is not None and record.next_tick_ms is None
    assert beat.advance("400d") == []


@pytest.mark.parametrize("missed", ["skip", "run_once"])
def test_frozen_beat_fires_a_missed_at_late_once(frozen: Any, missed: str) -> None:
    app = _app({"launch": {"task": "t", "schedule": f"@at {AT}", "missed": missed}})
    beat = frozen(app, "2026-12-24T00:00:00Z")
    beat.advance("2d", beat_running=False)
    (tick,) = beat.advance("1s")
    assert tick.tick_ms == AT_MS
    assert beat.advance("1d") == []


def test_frozen_beat_max_lateness_skips_a_late_at(frozen: Any) -> None:
    app = _app({"launch": {"task": "t", "schedule": f"@at {AT}", "max_lateness": 60}})
    beat = frozen(app, "2026-12-24T00:00:00Z")
    beat.advance("2d", beat_running=False)
    assert beat.advance("1s") == []
    (event,) = beat.store.history("launch", 10)
    assert (event.outcome, event.reason) == (Outcome.SKIPPED, "too_late")


def test_frozen_beat_never_fires_an_at_past_when_first_stored(frozen: Any) -> None:
    # an aware datetime in config is an @at too
    at = datetime(2026, 12, 24, 17, tzinfo=timezone.utc)
    app = _app({"late": {"task": "t", "schedule": at}})
    beat = frozen(app, "2026-12-25T00:00:00Z")
    assert beat.advance("10d") == []
    (event,) = beat.store.history("late", 10)
    assert (event.outcome, event.reason, event.tick_ms) == (Outcome.SKIPPED, "missed", AT_MS)
    record = beat.store.get("late")
    assert record is not None and record.next_tick_ms is None


def test_frozen_beat_skips_excluded_dates_without_a_record_and_agrees_with_next(
    frozen: Any,
) -> None:
    entry = {"task": "t", "schedule": "0 9 * * *", "exclude": ["2026-12-25", "2026-12-26"]}
    beat = frozen(_app({"d": entry}, tz="Pacific/Kiritimati"), "2026-12-23T00:00:00Z")
    record = beat.store.get("d")
    assert record is not None
    planned = ticks_after(record.definition, beat.store.now_ms(), 4)
    fired = [t.tick_ms for t in beat.advance("6d")]
    assert fired == planned
    assert [t[:10] for t in _local(fired, "Pacific/Kiritimati")] == [
        "2026-12-24",  # 09:00 on the 23rd had passed at the start (14:00 there)
        "2026-12-27",
        "2026-12-28",
        "2026-12-29",
    ]
    assert {e.outcome for e in beat.store.history("d", 100)} == {Outcome.ENQUEUED}


def test_stored_values_no_calendar_can_show_are_described_not_raised() -> None:
    """A stored @at past year 9999 (written by hand) still has words; an interval tick whose
    wall clock in the exclusions' zone is in year 10000 is not on an excluded date; a span
    ending on 9999-12-31 ends the search."""
    year_20000 = 568_971_820_800_000
    assert describe(AtSpec(year_20000, "UTC")) == f"once, at {year_20000} ms since 1970 (UTC)"
    last_day = date(9999, 12, 31)
    exclusions = Exclusions("Pacific/Kiritimati", ((last_day, last_day),))
    late = ms("9999-12-31T12:00:00+00:00")  # already 10000-01-01 in Kiritimati
    assert not excluded(exclusions, late)
    every_hour = ExcludedSpec(IntervalSpec(HOUR), Exclusions("UTC", ((last_day, last_day),)))
    assert next_tick(every_hour, ms("9999-12-30T23:30:00+00:00")) == ENDED_MS
