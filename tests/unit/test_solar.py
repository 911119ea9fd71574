"""Solar schedules against PyEphem itself, driven the way Celery's own ``solar`` drives it.

The reference in every comparison is computed here, not by the module under test: Celery's
``celery.schedules.solar`` builds the observer (its ``cal``, ``method`` and ``use_center``), and
PyEphem searches each event from a start a day before it, stepping over days without the event
the way Celery does (to the next anti-transit). Instants are compared as whole seconds, with
no tolerance: PyEphem's answer for one event moves by a few hundredths of a second with the
search start, so a handful of events whose instant lies that close to a whole second truncate
to the neighbouring second from Celery's start. Those are listed one by one in ``KNOWN_SPLITS``
(and each is checked to be such a case), so any other difference fails.
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from itertools import pairwise
from typing import Any

import ephem
import pytest
from celery.schedules import solar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_durable_beat.exceptions import OccurrenceSearchError
from celery_durable_beat.schedules import solar as solar_module
from celery_durable_beat.schedules.bounds import FIRST_MS, LAST_MS
from celery_durable_beat.schedules.errors import SpecError
from celery_durable_beat.schedules.solar import (
    EPHEM_MISSING,
    POLE_LIMIT,
    SOLAR_EVENTS,
    SolarSpec,
    describe_solar,
    next_solar_ms,
    parse_solar,
    solar_spec,
)

pytestmark = pytest.mark.unit

UTC = timezone.utc
TALLINN = (59.437, 24.745)
LONGYEARBYEN = (78.22, 15.65)
DAY_MS = 86_400_000
PROPERTY = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def _ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return _ms_of(datetime(year, month, day, hour, minute, second, tzinfo=UTC))


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _uncached() -> None:
    """Forget every window's tick, so a call computes from PyEphem again instead of answering
    from the cache (which would make any determinism check pass trivially)."""
    solar_module._window_tick.cache_clear()


def celery_events(event: str, lat: float, lon: float, start_ms: int, end_ms: int) -> list[Any]:
    """PyEphem's events in (start, end] as ``datetime`` (microseconds), searched the way Celery
    searches: from the start, then from a second after each event found (a run at the event),
    so each search starts about a day before its event; a ``CircumpolarError`` moves the start
    to the next anti-transit, as ``solar._next_event`` does."""
    reference = solar(event, lat, lon)
    observer, sun = reference.cal, ephem.Sun()
    options = {"use_center": True} if reference.use_center else {}
    start = _ephem_date(start_ms)
    found: list[Any] = []
    for _ in range(1000):
        try:
            moment = getattr(observer, reference.method)(sun, start=start, **options)
        except ephem.CircumpolarError:
            start = observer.next_antitransit(sun, start=start)
            continue
        when = moment.datetime().replace(tzinfo=UTC)
        if when > datetime.fromtimestamp(end_ms / 1000, UTC):
            return found
        found.append(when)
        start = ephem.Date(moment + ephem.second)
    raise AssertionError("the reference search did not end")


def ticks(spec: SolarSpec, start_ms: int, end_ms: int) -> list[int]:
    """The schedule's ticks in (start, end], by asking for each next one."""
    found: list[int] = []
    following = next_solar_ms(spec, start_ms)
    while following is not None and following <= end_ms:
        found.append(following)
        following = next_solar_ms(spec, following)
    return found


KNOWN_SPLITS = {
    ("sunrise", TALLINN, "2026-12-06T07:00:19+00:00"): -1,
    ("sunrise", (-43.95, -176.55), "2026-03-21T17:50:21+00:00"): +1,
    ("sunset", (-16.0, 180.0), "2026-03-22T06:09:37+00:00"): +1,
    ("dawn_civil", (63.43, 10.39), "2026-07-25T00:27:04+00:00"): +1,
}
"""Events whose PyEphem instant from Celery's start lies within PyEphem's precision (0.1 s) of
a whole second, and from this module's anchor on the other side of it: (event, place, Celery's
truncated instant) -> this module's tick minus Celery's, in seconds."""


def assert_matches_pyephem(event: str, place: tuple[float, float], start: int, end: int) -> int:
    """Every tick in (start, end] is PyEphem's event truncated to the second, but for the
    ``KNOWN_SPLITS`` in that span, each of which must happen; returns how many ticks."""
    expected, met = [], set()
    for when in celery_events(event, *place, start, end):
        second = when.replace(microsecond=0)
        key = (event, place, second.isoformat())
        split = KNOWN_SPLITS.get(key, 0)
        if split:  # the instant is a hair's breadth from the neighbouring second
            assert min(when.microsecond, 1_000_000 - when.microsecond) < 100_000
            assert (split < 0) == (when.microsecond < 500_000)
            met.add(key)
        expected.append(_ms_of(second) + split * 1000)
    found = ticks(SolarSpec(event, *place), start, end)
    assert [_iso(t) for t in found] == [_iso(t) for t in expected]
    listed = {
        key
        for key in KNOWN_SPLITS
        if key[:2] == (event, place) and start < _ms_of(datetime.fromisoformat(key[2])) <= end
    }
    assert met == listed  # a listed split that no longer happens is taken off the list
    return len(found)


def _ms_of(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


WEEKS = {
    "winter": (_ms(2026, 12, 1), _ms(2026, 12, 8)),
    "equinox": (_ms(2026, 3, 17), _ms(2026, 3, 23)),
    "white nights": (_ms(2026, 6, 18), _ms(2026, 6, 24)),
}


@pytest.mark.parametrize("week", WEEKS)
@pytest.mark.parametrize("event", SOLAR_EVENTS)
def test_tallinn_matches_pyephem(event: str, week: str) -> None:
    count = assert_matches_pyephem(event, TALLINN, *WEEKS[week])
    # Tallinn's white nights: the sun stays above -12 degrees, so no nautical or astronomical
    # dawn or dusk; every other event happens every day.
    absent = week == "white nights" and event.endswith(("nautical", "astronomical"))
    assert count == (0 if absent else {"winter": 7, "equinox": 6, "white nights": 6}[week])


PLACES = {
    "Sydney": (-33.87, 151.21),
    "Ushuaia": (-54.8, -68.3),
    "Chatham Islands": (-43.95, -176.55),
    "Fiji, east of 180": (-17.7, 179.99),
    "Fiji, west of 180": (-17.7, -179.99),
    "on the date line": (-16.0, 180.0),
}


@pytest.mark.parametrize("event", ["sunrise", "solar_noon", "sunset"])
@pytest.mark.parametrize("place", PLACES)
def test_south_and_date_line_match_pyephem(place: str, event: str) -> None:
    for start, end in (WEEKS["winter"], WEEKS["equinox"]):
        assert assert_matches_pyephem(event, PLACES[place], start, end) in (6, 7)


@pytest.mark.parametrize("event", [e for e in SOLAR_EVENTS if e.startswith(("dawn", "dusk"))])
def test_twilight_returning_after_the_white_nights(event: str) -> None:
    """At Trondheim twilight lasts all night in summer; the first dusk afterwards happens just
    before solar midnight and the last dawn before it just after. Windows starting at local
    midnight would lose such a dusk: this module's windows start hours away from any of them."""
    trondheim = (63.43, 10.39)
    start, end = _ms(2026, 7, 1), _ms(2026, 9, 20)
    assert assert_matches_pyephem(event, trondheim, start, end) >= 10
    first = celery_events(event, *trondheim, start, end)[0]
    assert _iso(next_solar_ms(SolarSpec(event, *trondheim), start) or 0) == (
        first.replace(microsecond=0).isoformat()
    )


def test_longitude_180_and_minus_180_are_one_place() -> None:
    east, west = SolarSpec("sunset", -16.0, 180.0), SolarSpec("sunset", -16.0, -180.0)
    start, end = WEEKS["equinox"]
    assert ticks(east, start, end) == ticks(west, start, end)


def test_the_docs_example() -> None:
    spec = parse_solar("@solar sunset 59.437 24.745", "Europe/Tallinn")
    start = _ms(2026, 12, 4)
    found = [_iso(t) for t in ticks(spec, start, start + 4 * DAY_MS)]
    assert found == [
        "2026-12-04T13:25:08+00:00",
        "2026-12-05T13:24:12+00:00",
        "2026-12-06T13:23:20+00:00",
        "2026-12-07T13:22:33+00:00",
    ]
    exact = celery_events("sunset", *TALLINN, start, start + 4 * DAY_MS)
    assert [w.isoformat(timespec="milliseconds") for w in exact] == [
        "2026-12-04T13:25:08.721+00:00",
        "2026-12-05T13:24:12.366+00:00",
        "2026-12-06T13:23:20.642+00:00",
        "2026-12-07T13:22:33.625+00:00",
    ]


def test_one_tick_whatever_the_search_starts_from() -> None:
    """PyEphem alone gives the 2026-12-06 sunrise at Tallinn as 07:00:18 from some starts and
    07:00:19 from others; the schedule gives one instant from every start of that day."""
    reference = solar("sunrise", *TALLINN)
    starts = [_ms(2026, 12, 5, 12) + i * 97_003 for i in range(660)]  # until 05:47 on the 6th
    direct = {
        reference.cal.next_rising(ephem.Sun(), start=_ephem_date(start))
        .datetime()
        .replace(microsecond=0)
        .isoformat()
        for start in starts
    }
    assert direct == {"2026-12-06T07:00:18", "2026-12-06T07:00:19"}
    spec = SolarSpec("sunrise", *TALLINN)
    found = set()
    for start in starts[::10]:
        _uncached()
        found.add(_iso(next_solar_ms(spec, start) or 0))
    assert found == {"2026-12-06T07:00:18+00:00"}


def _ephem_date(ms: int) -> Any:
    return ephem.Date(datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None))


@pytest.mark.parametrize("event", SOLAR_EVENTS)
def test_every_instant_of_a_day_gives_that_days_tick(event: str) -> None:
    spec = SolarSpec(event, *TALLINN)
    first = next_solar_ms(spec, _ms(2026, 12, 2))
    assert first is not None
    day_before = first - DAY_MS + 3_600_000  # after the previous day's tick
    for after in range(day_before, first, 1_234_567):
        _uncached()
        assert next_solar_ms(spec, after) == first
    assert next_solar_ms(spec, first - 1) == first


@pytest.mark.parametrize("event", SOLAR_EVENTS)
@pytest.mark.parametrize("place", [TALLINN, LONGYEARBYEN, (-33.87, 151.21), (0.0, 0.0)])
def test_ticks_strictly_increase_in_whole_seconds(event: str, place: tuple[float, float]) -> None:
    spec = SolarSpec(event, *place)
    found = ticks(spec, _ms(2026, 1, 1), _ms(2026, 3, 1))
    assert all(a < b for a, b in pairwise(found))
    for tick in found:
        assert tick % 1000 == 0
        assert next_solar_ms(spec, tick) != tick
        assert next_solar_ms(spec, tick - 1) == tick


@PROPERTY
@given(
    event=st.sampled_from(SOLAR_EVENTS),
    lat=st.floats(-POLE_LIMIT, POLE_LIMIT),
    lon=st.floats(-180, 180),
    after=st.integers(_ms(1990, 1, 1), _ms(2100, 1, 1)),
    back=st.integers(0, DAY_MS),
)
def test_a_tick_is_found_again_from_any_earlier_instant(
    event: str, lat: float, lon: float, after: int, back: int
) -> None:
    spec = solar_spec(event, lat, lon, "UTC")
    tick = next_solar_ms(spec, after)
    assert tick is not None and tick > after and tick % 1000 == 0
    following = next_solar_ms(spec, tick)
    assert following is not None and following > tick
    _uncached()
    assert next_solar_ms(spec, max(after, tick - 1 - back)) == tick


def test_ticks_agree_across_threads() -> None:
    spec = SolarSpec("dusk_nautical", *TALLINN)
    results: list[list[int]] = []

    def walk() -> None:
        results.append(ticks(spec, _ms(2027, 1, 1), _ms(2027, 2, 1)))

    _uncached()
    threads = [threading.Thread(target=walk) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 6 and len(results[0]) == 31
    assert all(r == results[0] for r in results)


def _timed_next(spec: SolarSpec, after: int) -> tuple[int | None, float]:
    _uncached()
    began = time.perf_counter()
    found = next_solar_ms(spec, after)
    return found, time.perf_counter() - began


def test_no_sunrise_in_the_polar_night() -> None:
    spec = SolarSpec("sunrise", *LONGYEARBYEN)
    found, took = _timed_next(spec, _ms(2026, 12, 1))
    assert found is not None and found > _ms(2026, 12, 31)
    assert took < 1.0
    first_of_2027 = celery_events("sunrise", *LONGYEARBYEN, _ms(2027, 1, 1), _ms(2027, 3, 1))[0]
    assert _iso(found) == first_of_2027.replace(microsecond=0).isoformat()
    assert first_of_2027.month == 2
    assert next_solar_ms(spec, _ms(2027, 1, 1)) == found


def test_no_sunset_under_the_midnight_sun() -> None:
    spec = SolarSpec("sunset", *LONGYEARBYEN)
    found, took = _timed_next(spec, _ms(2026, 6, 1))
    assert found is not None and found > _ms(2026, 7, 31)
    assert took < 1.0
    first = celery_events("sunset", *LONGYEARBYEN, _ms(2026, 6, 1), _ms(2026, 9, 1))[0]
    assert _iso(found) == first.replace(microsecond=0).isoformat()


@pytest.mark.parametrize("lat", [LONGYEARBYEN[0], 89.9, 90.0, -90.0])
def test_solar_noon_happens_every_day_everywhere(lat: float) -> None:
    spec = solar_spec("solar_noon", lat, 15.65, "UTC")
    found = ticks(spec, _ms(2026, 1, 1), _ms(2027, 1, 1))
    assert len(found) == 365
    assert all(abs(b - a - DAY_MS) < 60_000 for a, b in pairwise(found))


@pytest.mark.parametrize("event", [e for e in SOLAR_EVENTS if e != "solar_noon"])
@pytest.mark.parametrize("lat", [POLE_LIMIT, -POLE_LIMIT])
def test_every_event_happens_every_year_up_to_the_pole_limit(event: str, lat: float) -> None:
    spec = SolarSpec(event, lat, 0.0)
    for year in (1900, 2026, 9998):
        found = ticks(spec, _ms(year, 1, 1), _ms(year + 1, 1, 1))
        assert 0 < len(found) < 20


def test_a_stored_spec_at_the_pole_stops_searching() -> None:
    """Validation refuses it; one stored anyway raises, after a bounded walk, instead of
    answering "ended" or looping."""
    spec = SolarSpec("sunset", 90.0, 0.0)
    began = time.perf_counter()
    with pytest.raises(OccurrenceSearchError, match="no sunset in 400 days"):
        next_solar_ms(spec, _ms(2026, 1, 1))
    assert time.perf_counter() - began < 1.0


def test_ticks_end_with_year_9999() -> None:
    spec = SolarSpec("sunset", *TALLINN)
    last = next_solar_ms(spec, _ms(9999, 12, 31))
    assert last is not None and _iso(last).startswith("9999-12-31T")
    assert next_solar_ms(spec, last) is None
    assert next_solar_ms(spec, LAST_MS) is None
    assert next_solar_ms(SolarSpec("sunset", 0.0, -180.0), _ms(9999, 12, 31, 12)) is None


def test_ticks_begin_with_year_1900() -> None:
    spec = SolarSpec("sunrise", *TALLINN)
    first = next_solar_ms(spec, _ms(1800, 6, 1))
    assert first == next_solar_ms(spec, FIRST_MS - 1)
    assert first is not None and _iso(first).startswith("1900-01-01T")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "@solar sunset 59.4",
            "'@solar sunset 59.4' needs an event, a latitude and a longitude, "
            "e.g. '@solar sunset 59.437 24.745'",
        ),
        ("@solar sunset 59.4 24.7 0", "needs an event, a latitude and a longitude"),
        ("@solar", "needs an event, a latitude and a longitude"),
        ("@solarsunset 59 24", "needs an event, a latitude and a longitude"),
        (
            "@solar sunsett 59.437 24.745",
            'event "sunsett" is not a solar event; use one of dawn_astronomical, dawn_nautical, '
            "dawn_civil, sunrise, solar_noon, sunset, dusk_civil, dusk_nautical, "
            'dusk_astronomical, e.g. "sunset"',
        ),
        ("@solar Sunrise 59 24", 'event "Sunrise" is not a solar event; use one of'),
        ("@solar Sunrise 59 24", 'e.g. "sunrise"'),
        ("@solar midnight 59 24", 'e.g. "sunset"'),
        ("@solar sunset 91 24.745", "latitude 91 is outside -90..90; give degrees north"),
        ("@solar sunset -90.5 24.745", "latitude -90.5 is outside -90..90"),
        ("@solar sunset 59.4 180.01", "longitude 180.01 is outside -180..180; give degrees east"),
        ("@solar sunset nan 24.7", "latitude 'nan' is not a number; give degrees north"),
        ("@solar sunset 59.4 inf", "longitude 'inf' is not a number"),
        ("@solar sunset 5_9 24.7", "latitude '5_9' is not a number"),
        ("@solar sunset 59.4 east", "longitude 'east' is not a number"),
        ("@solar sunset 89.9 0", "latitude 89.9 is too close to the pole for sunset"),
        ("@solar dawn_civil -90 0", "give a latitude within -89.5..89.5"),
    ],
)
def test_parse_errors_say_what_to_write(text: str, problem: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_solar(text, "UTC")
    assert problem in str(raised.value)


@pytest.mark.parametrize(
    ("lat", "lon", "problem"),
    [
        (True, 24.7, "latitude True is not a number"),
        (59.4, None, "longitude None is not a number"),
        ("59.4", 24.7, "latitude '59.4' is not a number"),
        (float("nan"), 24.7, "latitude nan is not a finite number"),
        (59.4, float("-inf"), "longitude -inf is not a finite number"),
        (Decimal("NaN"), 24.7, "latitude NaN is not a finite number"),
        (10**400, 24.7, "latitude (a 1329-bit number) is outside -90..90"),
        (59.4, Fraction(361, 2), "longitude 361/2 is outside -180..180"),
        (Decimal("90.01"), 0, "latitude 90.01 is outside -90..90"),
    ],
)
def test_solar_spec_refuses_what_is_not_a_place(lat: object, lon: object, problem: str) -> None:
    with pytest.raises(SpecError) as raised:
        solar_spec("sunset", lat, lon, "UTC")
    assert problem in str(raised.value)


def test_solar_spec_refuses_an_event_that_is_not_a_string() -> None:
    with pytest.raises(SpecError, match="event 3 is not a solar event"):
        solar_spec(3, 59.4, 24.7, "UTC")


def test_solar_spec_takes_celerys_numbers() -> None:
    """django-celery-beat stores decimals; Celery's own ``solar`` takes ints and floats."""
    assert solar_spec("sunset", Decimal("59.437"), 24, "Europe/Tallinn") == SolarSpec(
        "sunset", 59.437, 24.0, "Europe/Tallinn"
    )
    assert solar_spec("solar_noon", -90, 180, "UTC") == SolarSpec("solar_noon", -90.0, 180.0)
    assert solar_spec("sunset", -0.0, -0.0, "UTC").text() == "@solar sunset 0 0"


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        (SolarSpec("sunset", 59.437, 24.745), "@solar sunset 59.437 24.745"),
        (SolarSpec("sunrise", 59.0, -180.0), "@solar sunrise 59 -180"),
        (SolarSpec("solar_noon", 0.1 + 0.2, 1e-05), "@solar solar_noon 0.30000000000000004 1e-05"),
    ],
)
def test_text(spec: SolarSpec, text: str) -> None:
    assert spec.text() == text
    assert parse_solar(text, spec.tz) == spec


@PROPERTY
@given(
    event=st.sampled_from(SOLAR_EVENTS),
    lat=st.floats(-POLE_LIMIT, POLE_LIMIT),
    lon=st.floats(-180, 180),
    tz=st.sampled_from(["UTC", "Europe/Tallinn", "Pacific/Fiji"]),
)
def test_text_round_trips(event: str, lat: float, lon: float, tz: str) -> None:
    spec = solar_spec(event, lat, lon, tz)
    assert parse_solar(spec.text(), tz) == spec
    assert parse_solar(f"  {spec.text().replace(' ', '   ')}\t", tz) == spec


def test_describe() -> None:
    assert describe_solar(SolarSpec("sunset", 59.437, 24.745)) == "at sunset in 59.437, 24.745"
    assert (
        describe_solar(SolarSpec("dawn_astronomical", -33.87, 151.21, "Australia/Sydney"))
        == "at astronomical dawn in -33.87, 151.21"
    )
    assert describe_solar(SolarSpec("solar_noon", 78.0, 15.65)) == "at solar noon in 78, 15.65"
    assert describe_solar(SolarSpec("dusk_civil", 0.0, 0.0)) == "at civil dusk in 0, 0"


def test_without_pyephem_solar_schedules_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ephem`` absent from the environment, as an import sees it: no schedule is accepted and
    a stored one cannot be planned, each saying which extra to install."""
    monkeypatch.setitem(sys.modules, "ephem", None)  # what `import ephem` meets when it is absent
    solar_module._ephem.cache_clear()
    try:
        for attempt in (
            lambda: parse_solar("@solar sunset 59.437 24.745", "UTC"),
            lambda: solar_spec("sunset", 59.437, 24.745, "UTC"),
            lambda: next_solar_ms(SolarSpec("sunset", 59.437, 24.745), _ms(2026, 1, 1)),
        ):
            with pytest.raises(SpecError) as raised:
                attempt()
            assert str(raised.value) == EPHEM_MISSING
        assert "pip install 'celery_durable_beat[solar]'" in EPHEM_MISSING
    finally:
        monkeypatch.undo()
        solar_module._ephem.cache_clear()
    assert next_solar_ms(SolarSpec("sunset", *TALLINN), _ms(2026, 12, 4)) == _ms(
        2026, 12, 4, 13, 25, 8
    )
