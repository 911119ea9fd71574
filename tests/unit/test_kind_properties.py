"""Properties every schedule kind of SPEC §18 holds, through the one engine every caller uses
(``occurrences.next_tick``): ticks strictly increase, ``next_tick`` of a tick never answers the
tick, and the tick after any instant between two ticks is the later one: the same instants,
whichever instant a process asks from (tick ids depend on it)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_durable_beat.schedules import parse_schedule
from celery_durable_beat.schedules.custom import CustomObject
from celery_durable_beat.schedules.occurrences import ENDED_MS, next_tick
from celery_durable_beat.schedules.solar import POLE_LIMIT, SOLAR_EVENTS
from celery_durable_beat.schedules.spec import ScheduleSpec

pytestmark = pytest.mark.unit

ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu")
START_MS = 946_684_800_000  # 2000-01-01
SPAN_MS = 60 * 365 * 86_400_000  # sixty years from it
UTC = timezone.utc


class Steps:
    """A custom class: every ``minutes`` minutes counted from midnight UTC of each day, the
    grid starting again at each midnight."""

    def __init__(self, minutes: int) -> None:
        self.minutes = minutes

    def next_after(self, instant: datetime) -> datetime:
        day = instant.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        passed = (instant - day) // timedelta(minutes=self.minutes) + 1
        return min(day + passed * timedelta(minutes=self.minutes), day + timedelta(days=1))

    def __repr__(self) -> str:
        return f"Steps({self.minutes})"


def _holds(spec: ScheduleSpec, after_ms: int, fraction: float) -> None:
    first = next_tick(spec, after_ms)
    assert first > after_ms
    if first >= ENDED_MS:
        return
    second = next_tick(spec, first)
    assert second > first, (first, second)
    assert next_tick(spec, first - 1) == first
    if second < ENDED_MS:
        between = first + int((second - first - 1) * fraction)
        assert next_tick(spec, between) == second, (first, between, second)
        assert next_tick(spec, second - 1) == second


_instants = st.integers(START_MS, START_MS + SPAN_MS)
_fractions = st.floats(0, 1)


@settings(max_examples=40, deadline=None, database=None)
@given(
    st.sampled_from(SOLAR_EVENTS),
    st.floats(-POLE_LIMIT, POLE_LIMIT),
    st.floats(-180, 180),
    _instants,
    _fractions,
)
def test_solar_ticks(event: str, lat: float, lon: float, after_ms: int, fraction: float) -> None:
    lat, lon = round(lat, 3), round(lon, 3)
    spec = parse_schedule(f"@solar {event} {lat} {lon}").spec
    _holds(spec, after_ms, fraction)


_DAYS = {
    "DAILY": ("", "BYDAY=MO,WE;", "BYMONTHDAY=-1;"),
    "WEEKLY": ("", "BYDAY=MO,WE;", "BYDAY=SU;"),
    "MONTHLY": ("", "BYDAY=-1FR;", "BYDAY=2SU;", "BYMONTHDAY=-1;", "BYDAY=MO,WE;"),
    "YEARLY": ("", "BYDAY=-1FR;", "BYDAY=2SU;", "BYMONTHDAY=-1;", "BYMONTH=3;BYDAY=-1SU;"),
}
_rules = st.sampled_from(sorted(_DAYS)).flatmap(
    lambda freq: st.builds(
        lambda day, interval, hour, minute: (
            f"RRULE:FREQ={freq};INTERVAL={interval};{day}BYHOUR={hour};BYMINUTE={minute};BYSECOND=0"
        ),
        st.sampled_from(_DAYS[freq]),
        st.just(1),
        st.integers(0, 23),
        st.sampled_from((0, 30, 59)),
    )
)


@settings(max_examples=60, deadline=None, database=None)
@given(_rules, st.sampled_from(ZONES), _instants, _fractions)
def test_rrule_ticks(rule: str, tz: str, after_ms: int, fraction: float) -> None:
    _holds(parse_schedule(rule, tz).spec, after_ms, fraction)


_extended = st.builds(
    lambda minute, hour, day: f"{minute} {hour} {day}",
    st.sampled_from(("0", "30", "*/20")),
    st.sampled_from(("1", "2", "9", "*/6")),
    st.sampled_from(("L * *", "* * 0#2", "* * 5#5", "* * L0", "* * L5", "L 2 *", "* * 1#1,5#3")),
)


@settings(max_examples=60, deadline=None, database=None)
@given(_extended, st.sampled_from(ZONES), _instants, _fractions)
def test_cron_extension_ticks(expr: str, tz: str, after_ms: int, fraction: float) -> None:
    _holds(parse_schedule(expr, tz).spec, after_ms, fraction)


@settings(max_examples=40, deadline=None, database=None)
@given(st.integers(1, 24 * 60), _instants, _fractions)
def test_custom_ticks(minutes: int, after_ms: int, fraction: float) -> None:
    spec = parse_schedule(CustomObject(Steps(minutes)), "UTC").spec
    _holds(spec, after_ms, fraction)
