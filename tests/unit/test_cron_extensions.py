"""Cron extensions (SPEC §18): ``L`` (the month's last day), ``<weekday>#<n>`` and ``L<weekday>``.

Three kinds of evidence, each independent of croniter and of the package's DST module:

* **Hand-computed tables** through :func:`next_tick`: every expected instant below was worked
  out from a calendar and the zone's 2026-2028 transitions and is written out as it reads on the
  zone's clock, offset included. The transitions used: America/New_York Mar 8 2026 02:00 EST ->
  03:00 EDT (07:00Z), Nov 1 2026 02:00 EDT -> 01:00 EST (06:00Z); Europe/Berlin Mar 29 2026
  02:00 CET -> 03:00 CEST (01:00Z), Oct 25 2026 03:00 CEST -> 02:00 CET (01:00Z), Mar 28 2027,
  Mar 26 2028 and Oct 29 2028 likewise.
* **A brute-force reference**: it walks calendar days, decides each one by the spec's day rule
  (both fields, or either) with its own reading of ``L``, ``#`` and ``L<weekday>``, and maps the
  wall time to an instant by SPEC §5 with a minute-by-minute scan over a gap. Every expression
  validation accepts must agree with it over 2026-2032 (two leap Februaries) from every month's
  start, and must never fail a search; every one refused for croniter's union must be one croniter
  really gets wrong.
* **The refusals and the words**, by their messages.
"""

from __future__ import annotations

import bisect
import calendar
import itertools
import random
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from celery_durable_beat.clock import datetime_to_ms
from celery_durable_beat.exceptions import ConfigError, OccurrenceSearchError
from celery_durable_beat.schedules.describe import describe
from celery_durable_beat.schedules.errors import SpecError
from celery_durable_beat.schedules.occurrences import next_tick, ticks_between
from celery_durable_beat.schedules.render import tick_isoformat
from celery_durable_beat.schedules.spec import (
    CronFields,
    CronSpec,
    DayRule,
    crontab5_day_rule,
    parse_schedule,
)
from celery_durable_beat.schedules.validate import validate_entry

from ._support import ms

pytestmark = pytest.mark.unit

UTC = timezone.utc
NY, BERLIN = "America/New_York", "Europe/Berlin"


def _ticks(expr: str, tz: str, after: str, count: int) -> list[str]:
    """The next ``count`` ticks of a cron string after an instant, on the zone's clock."""
    spec = parse_schedule(expr, tz).spec
    cursor, shown = ms(after), []
    for _ in range(count):
        cursor = next_tick(spec, cursor)
        shown.append(tick_isoformat(cursor, tz))
    return shown


# -- DST: the spring-forward and fall-back days are themselves n-th / last Sundays ---------------
DST_CASES = [
    pytest.param(
        # 2026-03-08 is the second Sunday of March: 02:30 does not exist in New York; the fixed
        # time fires once, at the change instant 07:00Z, which reads 03:00 EDT.
        "30 2 * * 0#2",
        NY,
        "2026-02-01T00:00:00-05:00",
        [
            "2026-02-08T02:30:00-05:00",  # 07:30Z
            "2026-03-08T03:00:00-04:00",  # 07:00Z, the change instant
            "2026-04-12T02:30:00-04:00",  # 06:30Z: nothing else on March 8
        ],
        id="ny-spring-forward-second-sunday",
    ),
    pytest.param(
        # 2026-11-01 is the first Sunday of November: 01:30 happens twice; first pass (EDT) only.
        "30 1 * * 0#1",
        NY,
        "2026-10-01T00:00:00-04:00",
        [
            "2026-10-04T01:30:00-04:00",  # 05:30Z
            "2026-11-01T01:30:00-04:00",  # 05:30Z, the first pass
            "2026-12-06T01:30:00-05:00",  # 06:30Z: not 01:30 EST on November 1 (06:30Z)
        ],
        id="ny-fall-back-first-sunday",
    ),
    pytest.param(
        # 2026-03-29 is the last Sunday of March: Berlin skips 02:00-03:00 at 01:00Z.
        "30 2 * * L0",
        BERLIN,
        "2026-02-01T00:00:00+01:00",
        [
            "2026-02-22T02:30:00+01:00",  # 01:30Z
            "2026-03-29T03:00:00+02:00",  # 01:00Z, the change instant
            "2026-04-26T02:30:00+02:00",  # 00:30Z
        ],
        id="berlin-spring-forward-last-sunday",
    ),
    pytest.param(
        # 2026-10-25 is the last Sunday of October: 02:00-03:00 happens twice; first pass (CEST).
        "30 2 * * L0",
        BERLIN,
        "2026-09-01T00:00:00+02:00",
        [
            "2026-09-27T02:30:00+02:00",  # 00:30Z
            "2026-10-25T02:30:00+02:00",  # 00:30Z, the first pass
            "2026-11-29T02:30:00+01:00",  # 01:30Z: not 02:30 CET on October 25 (01:30Z)
        ],
        id="berlin-fall-back-last-sunday",
    ),
]


@pytest.mark.parametrize(("expr", "tz", "after", "expected"), DST_CASES)
def test_extension_ticks_across_dst_changes(
    expr: str, tz: str, after: str, expected: list[str]
) -> None:
    assert _ticks(expr, tz, after, len(expected)) == expected


def test_a_search_from_the_second_pass_of_the_fold_skips_to_next_month() -> None:
    """From 01:00 EST on November 1 (06:00Z, the second pass), the first pass is behind."""
    spec = parse_schedule("30 1 * * 0#1", NY).spec
    found = next_tick(spec, ms("2026-11-01T06:00:00+00:00"))
    assert tick_isoformat(found, NY) == "2026-12-06T01:30:00-05:00"


def test_a_search_from_inside_the_gap_fires_at_the_change_instant_once() -> None:
    spec = parse_schedule("30 2 * * 0#2", NY).spec
    change = ms("2026-03-08T07:00:00+00:00")
    assert next_tick(spec, change - 1) == change
    assert tick_isoformat(next_tick(spec, change), NY) == "2026-04-12T02:30:00-04:00"


# -- whole years, by hand ---------------------------------------------------------------------
def test_last_day_of_each_month_in_leap_year_2028_in_berlin() -> None:
    """Berlin is on CEST from March 26 to October 29 2028, so 09:00 is 07:00Z in between."""
    assert _ticks("0 9 L * *", BERLIN, "2028-01-01T00:00:00+01:00", 13) == [
        "2028-01-31T09:00:00+01:00",  # 08:00Z
        "2028-02-29T09:00:00+01:00",  # 08:00Z: a leap February
        "2028-03-31T09:00:00+02:00",  # 07:00Z
        "2028-04-30T09:00:00+02:00",
        "2028-05-31T09:00:00+02:00",
        "2028-06-30T09:00:00+02:00",
        "2028-07-31T09:00:00+02:00",
        "2028-08-31T09:00:00+02:00",
        "2028-09-30T09:00:00+02:00",
        "2028-10-31T09:00:00+01:00",  # 08:00Z, CET again since October 29
        "2028-11-30T09:00:00+01:00",
        "2028-12-31T09:00:00+01:00",
        "2029-01-31T09:00:00+01:00",
    ]


def test_last_day_of_february_only_follows_leap_years() -> None:
    assert _ticks("0 9 L 2 *", NY, "2027-01-01T00:00:00-05:00", 3) == [
        "2027-02-28T09:00:00-05:00",  # 14:00Z
        "2028-02-29T09:00:00-05:00",
        "2029-02-28T09:00:00-05:00",
    ]


def test_docs_example_last_day_in_berlin_after_2026_12_04() -> None:
    """The four ticks docs/configuration.md lists; Berlin goes to CEST on 2027-03-28."""
    spec = parse_schedule("0 9 L * *", BERLIN).spec
    cursor, found = ms("2026-12-04T00:00:00+00:00"), []
    for _ in range(4):
        cursor = next_tick(spec, cursor)
        found.append(cursor)
    assert found == [
        ms("2026-12-31T08:00:00+00:00"),  # 09:00 CET
        ms("2027-01-31T08:00:00+00:00"),
        ms("2027-02-28T08:00:00+00:00"),
        ms("2027-03-31T07:00:00+00:00"),  # 09:00 CEST
    ]


def test_last_friday_of_each_month_of_2026_in_berlin() -> None:
    assert _ticks("0 9 * * L5", BERLIN, "2026-01-01T00:00:00+01:00", 12) == [
        "2026-01-30T09:00:00+01:00",
        "2026-02-27T09:00:00+01:00",
        "2026-03-27T09:00:00+01:00",  # two days before the change to CEST
        "2026-04-24T09:00:00+02:00",
        "2026-05-29T09:00:00+02:00",
        "2026-06-26T09:00:00+02:00",
        "2026-07-31T09:00:00+02:00",
        "2026-08-28T09:00:00+02:00",
        "2026-09-25T09:00:00+02:00",
        "2026-10-30T09:00:00+01:00",  # five days after the change back to CET
        "2026-11-27T09:00:00+01:00",
        "2026-12-25T09:00:00+01:00",
    ]


def test_fifth_friday_skips_the_months_that_have_none() -> None:
    """2026 has a fifth Friday only in January, May, July and October."""
    spec = parse_schedule("0 9 * * 5#5", NY).spec
    year = ticks_between(spec, ms("2026-01-01T00:00:00-05:00"), ms("2027-01-01T00:00:00-05:00"))
    assert [tick_isoformat(t, NY) for t in year] == [
        "2026-01-30T09:00:00-05:00",  # 14:00Z
        "2026-05-29T09:00:00-04:00",  # 13:00Z
        "2026-07-31T09:00:00-04:00",
        "2026-10-30T09:00:00-04:00",  # EDT until November 1
    ]
    assert tick_isoformat(next_tick(spec, year[-1]), NY) == "2027-01-29T09:00:00-05:00"


def test_six_fields_and_a_name_read_the_same_days() -> None:
    assert _ticks("15 0 9 * * fri#2", "UTC", "2026-01-01T00:00:00+00:00", 2) == [
        "2026-01-09T09:00:15+00:00",
        "2026-02-13T09:00:15+00:00",
    ]


# -- the brute-force reference --------------------------------------------------------------------
_WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_REFERENCE_DAYS = tuple(date(2025, 12, 1) + timedelta(days=i) for i in range(365 * 48))
"""Every calendar day from December 2025 into 2073: past the longest wait between two leap-day
Fridays (28 years, 40 across a skipped leap year) counted from 2032."""


def _weekday(text: str) -> int:
    """Sunday is 0 (and 7), as cron numbers weekdays."""
    return _WEEKDAY_NAMES.index(text.lower()) if text.isalpha() else int(text) % 7


def _days_in(day: date) -> int:
    return calendar.monthrange(day.year, day.month)[1]


def _dom_item(item: str, day: date) -> bool:
    if item in ("*", "?"):
        return True
    if item.upper() == "L":
        return day.day == _days_in(day)
    body, _, step_text = item.partition("/")
    step = int(step_text or 1)
    if body == "*":
        first, last = 1, 31
    elif "-" in body:
        low, high = body.split("-")
        first, last = int(low), 31 if high.upper() == "L" else int(high)
    else:
        first = last = int(body)
    return day.day in range(first, last + 1, step)


def _dow_item(item: str, day: date) -> bool:
    weekday = day.isoweekday() % 7
    if item in ("*", "?"):
        return True
    if "#" in item:
        body, count = item.split("#")
        ends = [_weekday(part) for part in body.split("-")]
        named = set(range(ends[0], ends[-1] + 1))
        return weekday in named and (day.day - 1) // 7 + 1 == int(count)
    if item[0] in "lL":
        return weekday == _weekday(item[1:]) and day.day + 7 > _days_in(day)
    if "-" in item:
        low, high = (int(part) for part in item.split("-"))
        return weekday in {v % 7 for v in range(low, high + 1)}
    return weekday == _weekday(item)


def _month_item(item: str, day: date) -> bool:
    if item == "*":
        return True
    low, _, high = item.partition("-")
    return int(low) <= day.month <= int(high or low)


@cache
def _matching(kind: str, field: str) -> tuple[bool, ...]:
    """For each reference day, whether this one field matches it."""
    test: Callable[[str, date], bool] = {"dom": _dom_item, "dow": _dow_item, "month": _month_item}[
        kind
    ]
    return tuple(any(test(item, day) for item in field.split(",")) for day in _REFERENCE_DAYS)


def _reference_days(dom: str, month: str, dow: str, rule: DayRule) -> list[date]:
    """The days a spec fires on: month, then both day fields or either, as the rule says."""
    by_dom, by_month, by_dow = (
        _matching("dom", dom),
        _matching("month", month),
        _matching("dow", dow),
    )
    join: Callable[[bool, bool], bool] = (
        (lambda a, b: a and b) if rule is DayRule.BOTH else (lambda a, b: a or b)
    )
    return [
        day
        for day, a, m, b in zip(_REFERENCE_DAYS, by_dom, by_month, by_dow, strict=True)
        if m and join(a, b)
    ]


def _instant_ms(wall: datetime, tz: ZoneInfo) -> int:
    """SPEC §5 for a fixed time: the first pass of a repeated wall time; for a skipped one, the
    first instant whose wall clock reads later, found minute by minute from the reading with the
    later offset (which lies before the change)."""
    first = wall.replace(tzinfo=tz)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall:
        return datetime_to_ms(first)
    instant = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    while instant.astimezone(tz).replace(tzinfo=None) <= wall:
        instant += timedelta(minutes=1)
    return datetime_to_ms(instant)


def _reference_ticks(fields: tuple[str, ...], tz: str, rule: DayRule) -> list[int]:
    """Ticks of a spec whose time fields name one wall time (``s m h`` or ``m h``)."""
    *times, dom, month, dow = fields
    second, minute, hour = (int(v) for v in ([*times] if len(times) == 3 else ["0", *times]))
    zone = ZoneInfo(tz)
    return [
        _instant_ms(datetime(d.year, d.month, d.day, hour, minute, second), zone)
        for d in _reference_days(dom, month, dow, rule)
    ]


# Day-of-month, weekday and month fields, each with the extension forms and the plain ones
# they combine with; times at 09:00 and at the changes' wall times in the two zones.
_DOMS = ("*", "?", "L", "1,L", "15-L", "29,L", "13", "8-14", "29", "31", "*/10")
_DOWS = ("*", "5", "1-5", "5#2", "fri#2", "L5", "L0", "7#1", "0#5", "5#5", "5#1,5#3", "1#1,L5")
_MONTHS = ("*", "2", "2,3", "10-12")
_TIMES = (("0", "9"), ("30", "0", "9"), ("30", "2"), ("30", "1"))
_SAMPLE = 260
_FROM, _UNTIL = ms("2026-01-01T00:00:00+00:00"), ms("2033-01-01T00:00:00+00:00")
_MONTH_STARTS = [
    ms(f"{y}-{m:02d}-01T00:00:00+00:00") for y in range(2026, 2033) for m in range(1, 13)
]


def _cases() -> list[tuple[tuple[str, ...], str, bool]]:
    """A seeded sample of (fields, zone, given as a crontab) over the whole product."""
    rng = random.Random(20260318)
    product = [
        (dom, dow, month, as_crontab)
        for dom, dow, month in itertools.product(_DOMS, _DOWS, _MONTHS)
        for as_crontab in (False, True)
        if (dom, dow) != ("?", "*")
    ]
    cases = []
    for dom, dow, month, as_crontab in rng.sample(product, _SAMPLE):
        time = rng.choice(_TIMES)
        cases.append(((*time, dom, month, dow), rng.choice(("UTC", NY, BERLIN)), as_crontab))
    return cases


def _validated(fields: tuple[str, ...], tz: str, as_crontab: bool) -> CronSpec | str:
    """The validated spec, or the problems validation names."""
    schedule: Any = CronFields(fields, DayRule.BOTH) if as_crontab else " ".join(fields)
    try:
        spec = validate_entry("job", {"task": "proj.job", "schedule": schedule, "tz": tz}).spec
    except ConfigError as exc:
        return "; ".join(p.problem for p in exc.problems)
    assert isinstance(spec, CronSpec)
    return spec


def _enumerated(spec: CronSpec) -> list[int]:
    found, cursor = [], _FROM
    while (cursor := next_tick(spec, cursor)) < _UNTIL:
        found.append(cursor)
    return found


def test_accepted_extension_forms_agree_with_the_calendar_walk_and_never_fail() -> None:
    """Every accepted spec: the same ticks as the reference over 2026-2032, and from every
    month's start the reference's next tick (later ones found past the reference's end are
    accepted only when the reference has none)."""
    accepted, never, mismatches = 0, 0, []
    for fields, tz, as_crontab in _cases():
        spec = _validated(fields, tz, as_crontab)
        if isinstance(spec, str):
            if "never fires" in spec:  # refused only when the calendar has no such day either
                rule = DayRule.BOTH if as_crontab else crontab5_day_rule(fields)
                dom, month, dow = fields[-3:]
                assert _reference_days(dom, month, dow, rule) == [], fields
            continue
        accepted += 1
        want = _reference_ticks(fields, tz, spec.day_rule)
        if _enumerated(spec) != [t for t in want if _FROM < t < _UNTIL]:
            mismatches.append((fields, tz, spec.day_rule, "enumeration"))
            continue
        for start in _MONTH_STARTS:
            try:
                got = next_tick(spec, start)
            except OccurrenceSearchError:
                mismatches.append((fields, tz, spec.day_rule, f"failed after {start}"))
                break
            index = bisect.bisect_right(want, start)
            if index < len(want) and got != want[index]:
                mismatches.append((fields, tz, spec.day_rule, f"after {start}"))
                break
        never += not want
    assert mismatches == [], mismatches[:5]
    assert accepted > 120
    assert never == 0  # a spec with no day in half a century is refused ("never fires")


def test_refused_unions_are_ones_croniter_searches_wrongly() -> None:
    """Each refusal for the "either" rule guards against a real wrong answer: the engine, given
    the spec anyway, fails to search it or gives other ticks than the calendar walk."""
    refused = 0
    for fields, tz, as_crontab in _cases():
        problem = _validated(fields, tz, as_crontab)
        if not (isinstance(problem, str) and "restricts both day fields" in problem):
            continue
        refused += 1
        spec = CronSpec(fields, tz)  # what validation would have stored
        assert spec.day_rule is DayRule.EITHER
        want = [t for t in _reference_ticks(fields, tz, DayRule.EITHER) if _FROM < t < _UNTIL]
        try:
            got = _enumerated(spec)
        except OccurrenceSearchError:
            continue
        assert got != want, fields
    assert refused > 30


def test_never_firing_crontab_days_are_refused_and_have_no_day() -> None:
    """A crontab needs both day fields: the 13th is never the last Friday of a month."""
    fields = ("0", "9", "13", "*", "L5")
    assert _reference_days("13", "*", "L5", DayRule.BOTH) == []
    problem = _validated(fields, "UTC", as_crontab=True)
    assert problem == '"0 9 13 * L5" never fires; check the day and month fields'


@pytest.mark.parametrize(
    ("fields", "first"),
    [
        # both must match: the last day of the month when it is a Friday
        (("0", "9", "L", "*", "5"), "2026-07-31T09:00:00+00:00"),
        # the second Friday falls on days 8-14 only
        (("0", "9", "8-14", "*", "5#2"), "2026-01-09T09:00:00+00:00"),
        # February 29 on a Sunday, the fifth Sunday of that February: 2032
        (("0", "9", "29", "2", "0#5"), "2032-02-29T09:00:00+00:00"),
    ],
)
def test_crontab_day_rule_with_extensions(fields: tuple[str, ...], first: str) -> None:
    spec = _validated(fields, "UTC", as_crontab=True)
    assert isinstance(spec, CronSpec)
    assert spec.day_rule is DayRule.BOTH
    assert tick_isoformat(next_tick(spec, ms("2026-01-01T00:00:00+00:00")), "UTC") == first


def test_either_with_plain_weekday_and_last_day_is_a_union() -> None:
    """``L`` with a plain weekday is a union croniter does search: every Friday and the 31st."""
    spec = parse_schedule("0 9 L * 5", "UTC").spec
    assert isinstance(spec, CronSpec)
    assert spec.day_rule is DayRule.EITHER
    assert _ticks("0 9 L * 5", "UTC", "2026-01-20T00:00:00+00:00", 4) == [
        "2026-01-23T09:00:00+00:00",  # a Friday
        "2026-01-30T09:00:00+00:00",  # a Friday
        "2026-01-31T09:00:00+00:00",  # the last day, a Saturday
        "2026-02-06T09:00:00+00:00",
    ]


# -- refusals ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expr", "says"),
    [
        (
            "0 9 L * 5#2",
            "write two schedules, '0 9 L * *' and '0 9 * * 5#2'",
        ),
        (
            "0 9 13 * L5",
            "write two schedules, '0 9 13 * *' and '0 9 * * L5'",
        ),
        (
            "0 0 9 1,L * 1#1,L5",
            "write two schedules, '0 0 9 1,L * *' and '0 0 9 * * 1#1,L5'",
        ),
        ("0 9 * * 5#6", "# counts a weekday's occurrences in the month, 1 to 5"),
        ("0 9 * * 5#0", "for the last one write L5"),
        ("0 9 * * 5L", "write L5 (L5 is the last Friday)"),
        ("0 9 * * L", "the month's last day is L in the day-of-month field"),
        ("0 9 * * Lfri", "L takes the weekday as a number 0-7"),
        ("0 9 * * 0-6,5#2", "mixes plain weekdays (0-6) with 5#2"),
        ("0 9 * * L5,1", "mixes plain weekdays (1) with L5"),
        ("0 9 L-3 * *", "alone (L) or ending a range (15-L)"),
        ("0 9 5L * *", "for the last such weekday write L5"),
    ],
)
def test_refusals_name_the_expression_and_the_fix(expr: str, says: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_schedule(expr)
    assert str(caught.value).startswith(repr(expr))
    assert says in str(caught.value)


def test_a_crontab_with_extensions_is_not_refused_for_the_union() -> None:
    """The refusal is about croniter's union; a crontab asks for both, which it searches."""
    spec = parse_schedule(CronFields(("0", "9", "1,L", "*", "L5"), DayRule.BOTH)).spec
    assert isinstance(spec, CronSpec)
    assert tick_isoformat(next_tick(spec, ms("2026-01-01T00:00:00+00:00")), "UTC") == (
        "2026-07-31T09:00:00+00:00"
    )


def test_validation_reports_the_refusal_against_the_schedule_field() -> None:
    with pytest.raises(ConfigError) as caught:
        validate_entry("report", {"task": "proj.report", "schedule": "0 9 L * 5#2"})
    [problem] = caught.value.problems
    assert (problem.entry, problem.field) == ("report", "schedule")
    assert "'0 9 L * *' and '0 9 * * 5#2'" in problem.problem


# -- words ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("schedule", "tz", "words"),
    [
        ("0 9 L * *", BERLIN, "at 09:00 on the last day of the month (Europe/Berlin)"),
        ("0 9 * * 5#2", "UTC", "at 09:00 on the second Friday of the month (UTC)"),
        ("0 9 * * fri#2", "UTC", "at 09:00 on the second Friday of the month (UTC)"),
        ("0 9 * * L5", "UTC", "at 09:00 on the last Friday of the month (UTC)"),
        ("0 9 * * 5#1,5#3", "UTC", "at 09:00 on the first and third Friday of the month (UTC)"),
        (
            "0 9 * * 1#1,L5",
            "UTC",
            "at 09:00 on the first Monday and the last Friday of the month (UTC)",
        ),
        (
            "0 9 * * 5#1,5#3,L5",
            "UTC",
            "at 09:00 on the first, third and last Friday of the month (UTC)",
        ),
        ("0 9 * * 7#2", "UTC", "at 09:00 on the second Sunday of the month (UTC)"),
        ("0 9 L 2 *", "UTC", "at 09:00 on the last day of February (UTC)"),
        ("30 2 * 3 0#2", NY, "at 02:30 on the second Sunday of March (America/New_York)"),
        (
            "0 9 L 1-3 *",
            "UTC",
            "at 09:00 on the last day of the month in January to March (UTC)",
        ),
        (
            "30 2 * 3,10 L0",
            BERLIN,
            "at 02:30 on the last Sunday of the month in March and October (Europe/Berlin)",
        ),
        ("0 9 1,L * *", "UTC", "at 09:00 on day 1 and the last day of the month (UTC)"),
        ("0 9 1,15,L * *", "UTC", "at 09:00 on days 1, 15 and the last day of the month (UTC)"),
        ("0 9 L * 1", "UTC", "at 09:00 on the last day of the month or on Monday (UTC)"),
        ("30 0 9 L * *", "UTC", "at 09:00:30 on the last day of the month (UTC)"),
        (
            "*/15 9-17 L * *",
            "UTC",
            "every 15 minutes from 09:00 to 17:45 on the last day of the month (UTC)",
        ),
        # forms without words keep the honest fallback
        ("0 9 15-L * *", "UTC", 'cron "0 9 15-L * *" (UTC)'),
        ("0 9 * * mon-fri#2", "UTC", 'cron "0 9 * * mon-fri#2" (UTC)'),
    ],
)
def test_extensions_in_words(schedule: str, tz: str, words: str) -> None:
    assert describe(parse_schedule(schedule, tz).spec) == words


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        (
            ("0", "9", "L", "*", "5"),
            "at 09:00 on the last day of the month if it is a Friday (UTC)",
        ),
        (
            ("0", "9", "13", "*", "L5"),
            "at 09:00 on day 13 of the month if it is the last Friday (UTC)",
        ),
        (
            ("0", "9", "1-7", "*", "1#1,5#1"),
            "at 09:00 on days 1-7 of the month if it is the first Monday or the first Friday (UTC)",
        ),
    ],
)
def test_crontab_extensions_in_words_say_both(fields: tuple[str, ...], words: str) -> None:
    assert describe(parse_schedule(CronFields(fields, DayRule.BOTH)).spec) == words


def test_a_stored_union_croniter_cannot_search_is_not_put_into_words() -> None:
    """Stored before the refusal existed, its ticks are not "either": the expression stays."""
    assert describe(CronSpec(("0", "9", "L", "*", "5#2"), "UTC")) == 'cron "0 9 L * 5#2" (UTC)'
