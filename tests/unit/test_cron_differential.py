"""The cron-string engine against another implementation of Debian cron's rules (``cronsim``).

Thousands of seeded random 5-field expressions, zones and start instants around DST changes:
for each, the next ticks of :func:`next_tick` must equal cronsim's. cronsim follows Debian cron
in both places this package cares about: the day-of-month / day-of-week rule (OR only when
neither field starts with ``*``) and DST (a fixed-time entry fires once, at the first valid
instant after a gap and at the first pass of a fold; a wildcard entry follows real time).

Where the comparison is deliberately narrowed, and why:

* **Zones** are those whose transitions move the clock by a whole hour away from midnight.
  cronsim steps into the gap minute by minute from a wall time and rebuilds days from local
  midnight, so in zones with 30-minute shifts (``Australia/Lord_Howe``) or transitions at
  midnight (``America/Santiago``, ``America/Havana``) it returns wall times that do not exist or
  skips real ones. SPEC §5's rules for those zones are covered by the table in ``test_dst.py``.
* **Six fields** (a leading seconds field) are not Debian cron; cronsim gives them no fixed-time
  DST handling, while SPEC §5 reads fixed time from the minute and hour fields whatever the
  seconds say.
* **Starts inside the second pass of a fold** are not compared: cronsim drops the fold of the
  instant it starts from, so a fixed-time entry it is asked about at 02:34 (second pass) answers
  02:59 of the *first* pass, an instant before the start.
* **Syntax** is what both accept: numbers, ``*``, ranges, steps, lists and English day names;
  no ``L``, ``W`` or ``#`` (extensions each library reads its own way), no equal-ended ranges
  (refused by the parser, SPEC: write the single value).
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim, CronSimError

from celery_durable_beat.clock import datetime_to_ms
from celery_durable_beat.exceptions import OccurrenceSearchError
from celery_durable_beat.schedules.occurrences import next_tick
from celery_durable_beat.schedules.spec import CronSpec, SpecError, parse_schedule

pytestmark = pytest.mark.unit

ZONES = (
    "UTC",
    "America/New_York",
    "America/Chicago",
    "Europe/Berlin",
    "Europe/London",
    "Australia/Sydney",
    "Pacific/Auckland",
    "Asia/Kolkata",
)
YEARS = (2025, 2026, 2027)
EXPRESSIONS = 1000
PLACES = 2
"""Each expression is compared in this many (zone, start) places: about 2,000 comparisons."""
TICKS = 3
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_UTC = timezone.utc


def _transitions(tz: str) -> list[datetime]:
    """The UTC hours at which ``tz`` changes its offset in ``YEARS`` (hour-by-hour scan)."""
    zone = ZoneInfo(tz)
    at = datetime(YEARS[0], 1, 1, tzinfo=_UTC)
    end = datetime(YEARS[-1] + 1, 1, 1, tzinfo=_UTC)
    found, before = [], at.astimezone(zone).utcoffset()
    while at < end:
        at += timedelta(hours=1)
        offset = at.astimezone(zone).utcoffset()
        if offset != before:
            found.append(at)
            before = offset
    return found


def _field(rng: random.Random, low: int, high: int, names: tuple[str, ...] = ()) -> str:
    """One random field in the syntax both implementations accept."""

    def value() -> str:
        number = rng.randint(low, high)
        if names and number < len(names) and rng.random() < 0.3:
            return names[number]
        return str(number)

    shape = rng.random()
    if shape < 0.25:
        return "*"
    if shape < 0.4:
        return f"*/{rng.randint(2, max(2, (high - low) // 2))}"
    if shape < 0.6:
        return value()
    if shape < 0.8:
        a, b = sorted(rng.sample(range(low, high + 1), 2))
        step = f"/{rng.randint(2, 4)}" if rng.random() < 0.3 else ""
        return f"{a}-{b}{step}"
    picks = sorted(rng.sample(range(low, high + 1), rng.randint(2, 4)))
    return ",".join(map(str, picks))


def _expression(rng: random.Random) -> str:
    """Hours near the usual change times and restricted day fields are over-represented."""
    hour = _field(rng, 0, 23) if rng.random() < 0.5 else rng.choice(["1", "2", "3", "1-3", "2,3"])
    month = "*" if rng.random() < 0.6 else _field(rng, 1, 12)
    return " ".join(
        (_field(rng, 0, 59), hour, _field(rng, 1, 31), month, _field(rng, 0, 7, DAY_NAMES))
    )


def _theirs(expr: str, tz: str, after: datetime) -> list[int] | None:
    try:
        sim = CronSim(expr, after.astimezone(ZoneInfo(tz)))
        return [datetime_to_ms(next(sim)) for _ in range(TICKS)]
    except (CronSimError, StopIteration):
        return None


def _ours(spec: CronSpec, after: datetime) -> list[int] | None:
    cursor, found = datetime_to_ms(after), []
    try:
        for _ in range(TICKS):
            cursor = next_tick(spec, cursor)
            found.append(cursor)
    except OccurrenceSearchError:
        return None
    return found


def _start(rng: random.Random, tz: str, near: list[datetime]) -> datetime:
    """An instant within a day and a half of a transition, outside a fold's second pass."""
    while True:
        at = rng.choice(near) + timedelta(minutes=rng.randint(-36 * 60, 36 * 60))
        at = at.replace(second=rng.choice([0, 0, 30]))
        if at.astimezone(ZoneInfo(tz)).fold == 0:
            return at


def test_cron_strings_match_debian_cron_as_cronsim_reads_it() -> None:
    rng = random.Random(20260313)
    starts = {tz: _transitions(tz) or [datetime(2026, 6, 1, tzinfo=_UTC)] for tz in ZONES}
    began, compared, mismatches = time.monotonic(), 0, []
    for _ in range(EXPRESSIONS):
        expr = _expression(rng)
        try:
            parsed = parse_schedule(expr).spec
        except SpecError:
            continue  # e.g. an equal-ended range the parser refuses
        assert isinstance(parsed, CronSpec)
        for tz in rng.sample(ZONES, PLACES):
            after = _start(rng, tz, starts[tz])
            theirs = _theirs(expr, tz, after)
            if theirs is None:
                continue  # cronsim refuses it (e.g. day 31 AND a 30-day month): no comparison
            compared += 1
            ours = _ours(replace(parsed, tz=tz), after)
            if ours != theirs:
                mismatches.append((expr, tz, after.isoformat(), ours, theirs))
    assert mismatches == [], mismatches[:5]
    assert compared > 1500
    assert time.monotonic() - began < 30  # a few seconds in practice; a bound, not a benchmark
