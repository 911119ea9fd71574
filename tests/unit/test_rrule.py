"""RFC 5545 recurrence rules (SPEC §18): ticks, DST, refusals, words, and plain dateutil.

The reference for every tick is python-dateutil itself, used the plain way: ``rrulestr`` over
the whole rule text, iterated from DTSTART, each naive wall time mapped to an instant by SPEC §5
for fixed-time entries (a gap's wall time at the change instant, a fold's at its first pass).
That mapping is written again here, by scanning offsets a second at a time, so it shares no
code with :mod:`celery_durable_beat.schedules.dst`. The engine restarts rules near the query
instead of iterating from DTSTART; agreeing with the reference years after DTSTART, for every
frequency, INTERVAL, BYSETPOS, BYWEEKNO, BYYEARDAY, negative BYMONTHDAY, numbered BYDAY and WKST,
is what proves the restart exact.
"""

from __future__ import annotations

import bisect
import itertools
import random
import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import rrulestr
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from celery_durable_beat.schedules.bounds import LAST_MS
from celery_durable_beat.schedules.errors import SpecError
from celery_durable_beat.schedules.rrule import (
    DEFAULT_DTSTART,
    RRuleSpec,
    describe_rrule,
    is_rrule_text,
    next_rrule_ms,
    parse_rrule,
)

from ._support import TRANSITIONS_MS, ms

pytestmark = pytest.mark.unit

UTC = timezone.utc
BERLIN, NEW_YORK, LORD_HOWE = "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"
SPEC_RULE = "RRULE:FREQ=MONTHLY;BYDAY=-1FR;BYHOUR=9;BYMINUTE=0;BYSECOND=0"
PROPERTY = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def spec_of(text: str, tz: str = "UTC") -> RRuleSpec:
    return parse_rrule(text, tz)[0]


def ticks(spec: RRuleSpec, after_ms: int, count: int) -> list[int]:
    """Up to ``count`` ticks after ``after_ms``, each asked from the one before."""
    found: list[int] = []
    cursor: int | None = after_ms
    while cursor is not None and len(found) < count:
        cursor = next_rrule_ms(spec, cursor)
        if cursor is not None:
            found.append(cursor)
    return found


def local(tick_ms: int, tz: str) -> str:
    return datetime.fromtimestamp(tick_ms / 1000, ZoneInfo(tz)).isoformat()


def reference_instant(wall: datetime, tz: ZoneInfo) -> int:
    """SPEC §5 for one fixed-time wall time, by brute force: a wall time that survives the
    round trip through UTC exists (a fold's fold=0 is its first pass); one that does not is in
    a gap and fires when the offset changes, found by scanning forward from the earlier
    reading of it."""
    first = wall.replace(tzinfo=tz, fold=0)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall:
        return int(first.timestamp())
    readings = sorted((int(first.timestamp()), int(wall.replace(tzinfo=tz, fold=1).timestamp())))
    offset = datetime.fromtimestamp(readings[0], tz).utcoffset()
    second = readings[0]
    while datetime.fromtimestamp(second + 60, tz).utcoffset() == offset:
        second += 60
    while datetime.fromtimestamp(second, tz).utcoffset() == offset:
        second += 1
    return second


def reference_ticks(text: str, tz: str, after_ms: int, until_ms: int) -> list[int]:
    """Plain dateutil: every tick in (after_ms, until_ms], oldest first (rules whose DTSTART
    carries a TZID are given here without it, read in that zone)."""
    zone = ZoneInfo(tz)
    rules = rrulestr(text.replace(f";TZID={tz}", ""), forceset=True, dtstart=DEFAULT_DTSTART)
    start = datetime.fromtimestamp(after_ms // 1000, zone).replace(tzinfo=None) - timedelta(days=1)
    found: list[int] = []
    for wall in rules.xafter(start, inc=True):
        tick = reference_instant(wall, zone) * 1000
        if tick > until_ms:
            break
        if tick > after_ms and (not found or tick != found[-1]):
            found.append(tick)
    return found


def reference_next(text: str, tz: str, after_ms: int, count: int, span_days: int) -> list[int]:
    return reference_ticks(text, tz, after_ms, after_ms + span_days * 86_400_000)[:count]


# --- The example of SPEC §18, zones, DTSTART forms -------------------------------------------


def test_spec_example_is_the_last_friday_at_nine_in_berlin() -> None:
    spec, tzid = parse_rrule(SPEC_RULE, BERLIN)
    assert (spec, tzid) == (RRuleSpec(SPEC_RULE, BERLIN), None)
    found = ticks(spec, ms("2026-12-04T00:00:00+00:00"), 8)
    assert [local(t, BERLIN) for t in found[:4]] == [
        "2026-12-25T09:00:00+01:00",
        "2027-01-29T09:00:00+01:00",
        "2027-02-26T09:00:00+01:00",
        "2027-03-26T09:00:00+01:00",
    ]
    for tick in found:  # each is a Friday at 09:00 Berlin time, and its month's last
        day = datetime.fromtimestamp(tick / 1000, ZoneInfo(BERLIN))
        assert (day.weekday(), day.hour, day.minute) == (4, 9, 0)
        assert (day + timedelta(days=7)).month != day.month
    start = ms("2026-12-04T00:00:00+00:00")
    assert found == reference_next(SPEC_RULE, BERLIN, start, 8, 300)


def test_dtstart_tzid_names_the_zone_and_the_stored_text_reads_back_equal() -> None:
    text = "  DTSTART;TZID=America/New_York:20260105T090000 \n\n RRULE:FREQ=WEEKLY;BYDAY=MO  "
    spec, tzid = parse_rrule(text, "UTC")
    assert tzid == NEW_YORK
    assert spec == RRuleSpec(
        "DTSTART;TZID=America/New_York:20260105T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO", NEW_YORK
    )
    assert spec.text() == spec.rule
    assert parse_rrule(spec.rule, spec.tz) == (spec, tzid)
    found = ticks(spec, ms("2026-01-01T00:00:00+00:00"), 3)
    assert [local(t, NEW_YORK) for t in found] == [
        "2026-01-05T09:00:00-05:00",
        "2026-01-12T09:00:00-05:00",
        "2026-01-19T09:00:00-05:00",
    ]


def test_dtstart_in_utc_is_read_on_the_zones_wall_clock() -> None:
    """14:00Z in January is 15:00 in Berlin: the rule is 15:00 local, in summer too."""
    spec = spec_of("DTSTART:20260105T140000Z\nRRULE:FREQ=DAILY", BERLIN)
    assert local(next_rrule_ms(spec, ms("2026-01-04T00:00:00+00:00")) or 0, BERLIN) == (
        "2026-01-05T15:00:00+01:00"
    )
    assert local(next_rrule_ms(spec, ms("2026-07-01T00:00:00+00:00")) or 0, BERLIN) == (
        "2026-07-01T15:00:00+02:00"
    )


def test_a_local_dtstart_is_read_in_the_schedules_zone() -> None:
    text = "DTSTART:20260105T090000\nRRULE:FREQ=DAILY"
    after = ms("2026-01-04T00:00:00+00:00")
    assert local(next_rrule_ms(spec_of(text, BERLIN), after) or 0, BERLIN).endswith(
        "09:00:00+01:00"
    )
    assert next_rrule_ms(spec_of(text, NEW_YORK), after) == ms("2026-01-05T09:00:00-05:00")


def test_is_rrule_text() -> None:
    for text in ("RRULE:FREQ=DAILY", " rrule:freq=daily", "DTSTART:20260101T000000\nRRULE:..."):
        assert is_rrule_text(text)
    assert is_rrule_text("dtstart;TZID=Europe/Berlin:20260101T000000")
    for text in ("0 9 * * *", "@every 5m", "RDATE:20260101T000000", "FREQ=DAILY", ""):
        assert not is_rrule_text(text)


def test_names_and_values_are_read_case_insensitively() -> None:
    lower = spec_of("dtstart:20260105t090000\nrrule:freq=weekly;byday=mo,we;wkst=su", BERLIN)
    upper = spec_of("DTSTART:20260105T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO,WE;WKST=SU", BERLIN)
    after = ms("2026-01-01T00:00:00+00:00")
    assert ticks(lower, after, 6) == ticks(upper, after, 6)
    assert lower.rule.startswith("dtstart:")  # stored as written


# --- RDATE, EXDATE, COUNT, UNTIL ----------------------------------------------------------------


def test_exdate_removes_and_rdate_adds() -> None:
    text = (
        "DTSTART:20260105T090000\nRRULE:FREQ=DAILY\n"
        "EXDATE:20260107T090000\nRDATE:20260107T123000,20260110T080000\n"
        "EXDATE:20260108T080000Z"  # 09:00 in Berlin
    )
    found = ticks(spec_of(text, BERLIN), ms("2026-01-05T00:00:00+01:00"), 7)
    assert [local(t, BERLIN)[5:16] for t in found] == [
        "01-05T09:00",
        "01-06T09:00",
        "01-07T12:30",
        "01-09T09:00",
        "01-10T08:00",
        "01-10T09:00",
        "01-11T09:00",
    ]
    plain = text.replace("20260108T080000Z", "20260108T090000")  # dateutil reads no Z here
    assert found == reference_next(plain, BERLIN, ms("2026-01-05T00:00:00+01:00"), 7, 30)


def test_an_exdate_also_removes_an_rdate_and_an_rdate_in_another_zone_is_converted() -> None:
    text = (
        "DTSTART:20260105T090000\nRRULE:FREQ=DAILY;COUNT=1\n"
        "RDATE;TZID=America/New_York:20260106T030000\nRDATE:20260107T090000\n"
        "EXDATE:20260107T090000"
    )
    found = ticks(spec_of(text, BERLIN), ms("2026-01-01T00:00:00+00:00"), 5)
    assert [local(t, BERLIN) for t in found] == [
        "2026-01-05T09:00:00+01:00",
        "2026-01-06T09:00:00+01:00",  # 03:00 in New York
    ]


def test_count_ends_the_schedule_and_counts_before_exdate() -> None:
    text = "DTSTART:20260105T090000\nRRULE:FREQ=WEEKLY;COUNT=3"
    spec = spec_of(text, BERLIN)
    found = ticks(spec, ms("2026-01-01T00:00:00+00:00"), 10)
    assert [local(t, BERLIN)[:10] for t in found] == ["2026-01-05", "2026-01-12", "2026-01-19"]
    assert next_rrule_ms(spec, found[-1]) is None
    assert next_rrule_ms(spec, ms("2030-01-01T00:00:00+00:00")) is None
    excluded = spec_of(text + "\nEXDATE:20260112T090000", BERLIN)
    found = ticks(excluded, ms("2026-01-01T00:00:00+00:00"), 10)
    assert [local(t, BERLIN)[:10] for t in found] == ["2026-01-05", "2026-01-19"]
    assert found == reference_next(text + "\nEXDATE:20260112T090000", BERLIN, 0, 10, 30_000)


@pytest.mark.parametrize(
    ("until", "days"),
    [
        ("20260107T090000", 3),  # local and inclusive: the 7th at 09:00 still fires
        ("20260107T085959", 2),
        ("20260107T080000Z", 3),  # 09:00 in Berlin
        ("20260107T075959Z", 2),
    ],
)
def test_until_ends_the_schedule_inclusively(until: str, days: int) -> None:
    spec = spec_of(f"DTSTART:20260105T090000\nRRULE:FREQ=DAILY;UNTIL={until}", BERLIN)
    found = ticks(spec, ms("2026-01-01T00:00:00+00:00"), 10)
    assert [local(t, BERLIN)[:10] for t in found] == [f"2026-01-0{5 + i}" for i in range(days)]
    assert next_rrule_ms(spec, found[-1]) is None


def test_until_in_utc_at_a_folds_second_pass_keeps_the_first_pass() -> None:
    """UNTIL is an instant: 01:30 fired at its first pass (05:30Z), before 06:15Z."""
    text = "DTSTART:20261031T013000\nRRULE:FREQ=DAILY;UNTIL=20261101T061500Z"
    found = ticks(spec_of(text, NEW_YORK), ms("2026-10-30T00:00:00+00:00"), 5)
    assert [local(t, NEW_YORK) for t in found] == [
        "2026-10-31T01:30:00-04:00",
        "2026-11-01T01:30:00-04:00",
    ]


# --- DST: rules are fixed-time entries (SPEC §5) ------------------------------------------------

DST_CASES = [
    # spring forward: 02:30 does not exist that day, the tick is the change instant (03:00)
    (
        NEW_YORK,
        "2026-03-07T12:00:00-05:00",
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
    ),
    (
        BERLIN,
        "2026-03-28T12:00:00+01:00",
        ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
    ),
    # fall back: the repeated wall time fires once, at its first pass
    (
        NEW_YORK,
        "2026-10-31T12:00:00-04:00",
        ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
    ),
    (
        BERLIN,
        "2026-10-24T12:00:00+02:00",
        ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
    ),
    # asked from inside the second pass, the repeated wall time is not fired again
    (NEW_YORK, "2026-11-01T01:15:00-05:00", ["2026-11-02T01:30:00-05:00"]),
    (BERLIN, "2026-10-25T02:15:00+01:00", ["2026-10-26T02:30:00+01:00"]),
]


@pytest.mark.parametrize(("tz", "after", "expected"), DST_CASES)
def test_dst_gap_fires_at_the_change_and_fold_at_the_first_pass(
    tz: str, after: str, expected: list[str]
) -> None:
    clock = "013000" if tz == NEW_YORK and "-1" in expected[0][:8] else "023000"
    text = f"DTSTART:20260101T{clock}\nRRULE:FREQ=DAILY"
    found = ticks(spec_of(text, tz), ms(after), len(expected))
    assert [local(t, tz) for t in found] == expected
    assert found == reference_next(text, tz, ms(after), len(expected), 5)


def test_hourly_across_both_changes_is_a_fixed_time_rule() -> None:
    """HOURLY wall times map one by one. Spring forward: 02:00 is in the gap and fires at the
    change instant, which is also 03:00, so the two collapse and real time sees a tick every
    hour. Fall back: 01:00 fires at its first pass only, so real time sees two hours between
    the 01:00 and 02:00 ticks (each wall hour once, like a fixed-time cron entry)."""
    spec = spec_of("DTSTART:20260101T000000\nRRULE:FREQ=HOURLY", NEW_YORK)
    spring = ticks(spec, ms("2026-03-08T00:30:00-05:00"), 3)
    assert [local(t, NEW_YORK) for t in spring] == [
        "2026-03-08T01:00:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T04:00:00-04:00",
    ]
    assert [b - a for a, b in itertools.pairwise(spring)] == [3_600_000, 3_600_000]
    fall = ticks(spec, ms("2026-11-01T00:30:00-04:00"), 3)
    assert [local(t, NEW_YORK) for t in fall] == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T02:00:00-05:00",
        "2026-11-01T03:00:00-05:00",
    ]
    assert fall[1] - fall[0] == 2 * 3_600_000
    for after in ("2026-03-08T00:30:00-05:00", "2026-11-01T00:30:00-04:00"):
        assert ticks(spec, ms(after), 3) == reference_next(spec.rule, NEW_YORK, ms(after), 3, 2)


def test_lord_howe_half_hour_gap_collapses_into_the_change() -> None:
    """Lord Howe jumps from 02:00 to 02:30: 02:00 and 02:15 both fire once, at 02:30."""
    text = "DTSTART:20261001T020000\nRRULE:FREQ=DAILY;BYMINUTE=0,15,30"
    found = ticks(spec_of(text, LORD_HOWE), ms("2026-10-04T01:00:00+10:30"), 3)
    assert [local(t, LORD_HOWE) for t in found] == [
        "2026-10-04T02:30:00+11:00",
        "2026-10-05T02:00:00+11:00",
        "2026-10-05T02:15:00+11:00",
    ]


# --- Equivalence with plain dateutil, years after DTSTART -------------------------------------

EQUIVALENT_RULES = [
    "DTSTART:20030302T013000\nRRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU;BYHOUR=1,2,3;BYMINUTE=30",
    "DTSTART:20011104T013000\nRRULE:FREQ=YEARLY;BYMONTH=11;BYDAY=1SU;BYHOUR=1,2;BYMINUTE=30",
    "DTSTART:20020102T100000\nRRULE:FREQ=YEARLY;INTERVAL=3;BYWEEKNO=1,-1,20;BYDAY=MO,SU;WKST=SU",
    "DTSTART:20020102T100000\nRRULE:FREQ=YEARLY;BYYEARDAY=1,-1,100;BYHOUR=12",
    "DTSTART:20000229T120000\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29",
    "DTSTART:19990101T060000\nRRULE:FREQ=YEARLY;INTERVAL=2;BYDAY=20MO,-3FR",
    "DTSTART:19990101T060000\nRRULE:FREQ=YEARLY;BYMONTH=1,6;BYDAY=MO,FR;BYSETPOS=2,-1",
    "DTSTART:20050131T083000\nRRULE:FREQ=MONTHLY;INTERVAL=5;BYMONTHDAY=-1,-3,31",
    "DTSTART:20050131T083000\nRRULE:FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=1,-1",
    "DTSTART:20050131T083000\nRRULE:FREQ=MONTHLY;INTERVAL=2;BYDAY=2TU,-2WE;BYMONTH=1,3,5,8",
    "DTSTART:20050113T020000\nRRULE:FREQ=MONTHLY;BYMONTHDAY=13;BYDAY=FR",
    "DTSTART:20050131T083000\nRRULE:FREQ=MONTHLY;INTERVAL=7",
    "DTSTART:20060110T021500\nRRULE:FREQ=WEEKLY;INTERVAL=3;WKST=SU;BYDAY=SU,TU",
    "DTSTART:20060110T021500\nRRULE:FREQ=WEEKLY;INTERVAL=2;WKST=TH;BYDAY=MO,FR;BYSETPOS=-1",
    "DTSTART:20060110T000000\nRRULE:FREQ=WEEKLY;BYDAY=SU;BYHOUR=1,2;BYMINUTE=0,30,59",
    "DTSTART:20060108T020000\nRRULE:FREQ=WEEKLY;INTERVAL=5",
    "DTSTART:20090301T011500\nRRULE:FREQ=DAILY;INTERVAL=9;BYHOUR=1,2,3",
    "DTSTART:20090301T020000\nRRULE:FREQ=DAILY;INTERVAL=4;BYDAY=SA,SU;BYMONTH=3,10,11",
    "DTSTART:20090301T020000\nRRULE:FREQ=DAILY;BYMONTHDAY=-1,1;BYHOUR=2,14;BYSETPOS=-1",
    "DTSTART:20100101T013017\nRRULE:FREQ=HOURLY;INTERVAL=7;BYDAY=SU;BYMONTH=3,10,11",
    "DTSTART:20100101T010000\nRRULE:FREQ=HOURLY;INTERVAL=5;BYHOUR=1,2,6,11;BYMINUTE=0,30",
    "DTSTART:20100101T013017\nRRULE:FREQ=MINUTELY;INTERVAL=17;BYHOUR=1,2;BYMONTH=3,10,11",
    "DTSTART:20100101T010000\nRRULE:FREQ=MINUTELY;INTERVAL=45;BYDAY=SU;BYMONTH=3,4,10,11",
    "DTSTART:20100101T010001\nRRULE:FREQ=SECONDLY;INTERVAL=601;BYHOUR=1,2;BYMONTH=3,10,11",
    "DTSTART:20100101T010000\nRRULE:FREQ=SECONDLY;INTERVAL=30;BYHOUR=2;BYMINUTE=0;BYDAY=SU",
]


@pytest.mark.parametrize("text", EQUIVALENT_RULES)
@pytest.mark.parametrize("tz", [NEW_YORK, BERLIN, LORD_HOWE])
def test_years_after_dtstart_the_ticks_are_plain_dateutils(text: str, tz: str) -> None:
    """Queries around the 2026 changes and on random instants of 2026-2031, with the ticks
    of the five years after them from one plain dateutil pass."""
    rng = random.Random(f"{text}{tz}")
    queries = sorted(
        [t + rng.randrange(-6 * 3_600_000, 6 * 3_600_000) for t in TRANSITIONS_MS.values()]
        + [ms("2026-01-01T00:00:00+00:00") + rng.randrange(5 * 365 * 86_400_000) for _ in range(6)]
    )
    until = queries[-1] + 5 * 365 * 86_400_000
    expected = reference_ticks(text, tz, queries[0], until)
    spec = spec_of(text, tz)
    for query in queries:
        at = bisect.bisect_right(expected, query)
        found = [tick for tick in ticks(spec, query, 4) if tick <= until]
        assert found == expected[at : at + 4], (text, tz, query)
        assert found  # every rule here fires within five years


FREQ_NAMES = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY")
STARTS = {  # how long before the query DTSTART may be, kept to what plain dateutil walks quickly
    "YEARLY": 40 * 365,
    "MONTHLY": 30 * 365,
    "WEEKLY": 12 * 365,
    "DAILY": 8 * 365,
    "HOURLY": 200,
    "MINUTELY": 4,
    "SECONDLY": 1,
}


def _numbers(low: int, high: int, signed: bool = False) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    if signed:
        value = st.one_of(value, st.integers(-high, -low))
    return st.lists(value, min_size=1, max_size=3, unique=True).map(
        lambda vs: ",".join(map(str, vs))
    )


@st.composite
def rule_parts(draw: st.DrawFn) -> tuple[str, str]:
    """An RRULE value and its frequency: day parts suited to the frequency, numbered weekdays
    for MONTHLY/YEARLY only (as RFC 5545 wants)."""
    freq = draw(st.sampled_from(FREQ_NAMES))
    parts = [f"FREQ={freq}"]
    interval = draw(st.one_of(st.just(1), st.integers(2, 13)))
    if interval > 1:
        parts.append(f"INTERVAL={interval}")
    weekday = st.sampled_from(["MO", "TU", "WE", "TH", "FR", "SA", "SU"])
    ordinal = st.integers(1, 5 if freq == "MONTHLY" else 53).flatmap(
        lambda n: st.sampled_from([str(n), f"-{n}", f"+{n}"])
    )
    day = (
        weekday
        if freq not in ("MONTHLY", "YEARLY")
        else st.one_of(weekday, st.tuples(ordinal, weekday).map("".join))
    )
    optional = {
        "BYMONTH": _numbers(1, 12),
        "BYMONTHDAY": _numbers(1, 28, signed=True),
        "BYDAY": st.lists(day, min_size=1, max_size=3, unique=True).map(",".join),
        "BYHOUR": _numbers(0, 23),
        "BYMINUTE": _numbers(0, 59),
        "BYSECOND": _numbers(0, 59),
        "WKST": weekday,
    }
    if freq == "YEARLY":
        optional["BYWEEKNO"] = _numbers(1, 53, signed=True)
        optional["BYYEARDAY"] = _numbers(1, 366, signed=True)
    for name, values in optional.items():
        if draw(st.integers(0, 3)) == 0:
            parts.append(f"{name}={draw(values)}")
    if freq in ("YEARLY", "MONTHLY", "WEEKLY") and draw(st.integers(0, 4)) == 0:
        parts.append(f"BYSETPOS={draw(_numbers(1, 3, signed=True))}")
    return ";".join(parts), freq


zones = st.sampled_from([NEW_YORK, BERLIN, LORD_HOWE, "Asia/Kathmandu", "UTC"])
queries = st.one_of(
    st.builds(
        lambda at, offset: at + offset,
        st.sampled_from(sorted(TRANSITIONS_MS.values())),
        st.integers(-12 * 3_600_000, 12 * 3_600_000),
    ),
    st.integers(ms("2026-01-01T00:00:00+00:00"), ms("2029-12-31T00:00:00+00:00")),
)


def _rule_text(parts: str, freq: str, query: int, back: float) -> str:
    start = datetime.fromtimestamp(query // 1000, UTC) - timedelta(days=STARTS[freq] * back)
    return f"DTSTART:{start:%Y%m%dT%H%M%S}\nRRULE:{parts}"


@PROPERTY
@given(rule=rule_parts(), tz=zones, query=queries, back=st.floats(0, 1))
def test_generated_rules_agree_with_plain_dateutil(
    rule: tuple[str, str], tz: str, query: int, back: float
) -> None:
    text = _rule_text(*rule, query, back)
    try:
        spec = spec_of(text, tz)
    except SpecError:
        assume(False)
        raise
    span = {"SECONDLY": 1, "MINUTELY": 2, "HOURLY": 40}.get(rule[1], 20 * 366)
    expected = reference_next(text, tz, query, 3, span)
    event(f"{len(expected)} ticks compared")
    assert ticks(spec, query, len(expected)) == expected


@PROPERTY
@given(rule=rule_parts(), tz=zones, query=queries)
def test_ticks_strictly_increase_and_never_repeat(
    rule: tuple[str, str], tz: str, query: int
) -> None:
    """DTSTART decades back: only the engine runs here, which never walks from DTSTART.

    Each tick is asked from the one before, so strictly increasing ticks also prove that no
    tick is its own successor. Twelve ticks, not more: a sub-daily rule whose day parts match
    once in decades (``FREQ=MINUTELY;INTERVAL=11;BYMONTH=1;BYMONTHDAY=1;BYDAY=MO;...``) costs
    dateutil's day-by-day walk up to a second a tick, and this property must stay well inside
    pytest's timeout, whose exception Hypothesis would take for a failure and shrink for hours.
    """
    text = f"DTSTART:19950101T013000\nRRULE:{rule[0]}"
    try:
        spec = spec_of(text, tz)
    except SpecError:
        assume(False)
        raise
    found = ticks(spec, query, 12)
    assert all(b > a for a, b in itertools.pairwise([query, *found]))
    assert all(t % 1000 == 0 for t in found)


# --- Bounds --------------------------------------------------------------------------------------


def test_time_ends_at_year_9999() -> None:
    spec = spec_of("DTSTART:99991231T220000\nRRULE:FREQ=HOURLY")
    assert ticks(spec, ms("9999-12-31T00:00:00+00:00"), 5) == [
        ms("9999-12-31T22:00:00+00:00"),
        ms("9999-12-31T23:00:00+00:00"),
    ]
    assert next_rrule_ms(spec, LAST_MS) is None
    west = spec_of("DTSTART;TZID=America/New_York:99991231T170000\nRRULE:FREQ=HOURLY")
    assert ticks(west, ms("9999-12-31T00:00:00+00:00"), 5) == [
        ms("9999-12-31T17:00:00-05:00"),
        ms("9999-12-31T18:00:00-05:00"),  # 23:00Z; 19:00 would be in year 10000 in UTC
    ]
    east = spec_of("DTSTART;TZID=Pacific/Kiritimati:99991231T210000\nRRULE:FREQ=HOURLY")
    after = ms("9999-12-30T00:00:00+00:00")
    assert [local(t, "Pacific/Kiritimati")[11:13] for t in ticks(east, after, 5)] == [
        "21",
        "22",
        "23",
    ]


def test_a_week_running_into_year_10000_ends_the_schedule() -> None:
    spec = spec_of("DTSTART:99991201T000000\nRRULE:FREQ=WEEKLY;BYDAY=MO,SU;WKST=WE")
    found = ticks(spec, ms("9999-12-20T00:00:00+00:00"), 10)
    assert [local(t, "UTC")[:10] for t in found] == ["9999-12-26", "9999-12-27"]


def test_a_query_from_long_before_dtstart_finds_the_first_tick() -> None:
    spec = spec_of("DTSTART:20260105T090000\nRRULE:FREQ=DAILY;COUNT=2", BERLIN)
    first = ms("2026-01-05T09:00:00+01:00")
    assert next_rrule_ms(spec, -(10**15)) == first
    assert next_rrule_ms(spec, first - 1) == first
    assert next_rrule_ms(spec, first) == first + 86_400_000


def test_without_dtstart_the_rule_starts_at_a_fixed_instant_not_now() -> None:
    """1973-01-01T00:00 local, a Monday: WEEKLY falls on Mondays, MONTHLY on the 1st,
    YEARLY on 1 January, all at midnight; every process computes the same ticks."""
    after = ms("2026-06-10T12:00:00+00:00")
    assert local(next_rrule_ms(spec_of("RRULE:FREQ=WEEKLY", BERLIN), after) or 0, BERLIN) == (
        "2026-06-15T00:00:00+02:00"
    )
    assert local(next_rrule_ms(spec_of("RRULE:FREQ=MONTHLY"), after) or 0, "UTC")[:19] == (
        "2026-07-01T00:00:00"
    )
    assert local(next_rrule_ms(spec_of("RRULE:FREQ=YEARLY"), after) or 0, "UTC")[:19] == (
        "2027-01-01T00:00:00"
    )
    quarters = ticks(spec_of("RRULE:FREQ=MINUTELY;INTERVAL=15"), ms("2026-06-10T12:07:00+00:00"), 3)
    assert [local(t, "UTC")[11:16] for t in quarters] == ["12:15", "12:30", "12:45"]
    assert ticks(spec_of("RRULE:FREQ=DAILY;BYHOUR=9"), 0, 1) == [ms("1973-01-01T09:00:00+00:00")]


# --- Refusals ------------------------------------------------------------------------------------

REFUSALS = [
    (
        "RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",
        'rule "RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30" has no occurrence between 1900 and '
        "9999; check BYMONTH/BYMONTHDAY",
    ),
    ("RRULE:FREQ=SECONDLY;BYMONTH=4;BYMONTHDAY=31", "has no occurrence between 1900 and 9999"),
    ("DTSTART:19010101T000000\nRRULE:FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29", "no occ"),
    ("DTSTART:20260105T000000\nRRULE:FREQ=DAILY;INTERVAL=7;BYDAY=TU", "no occurrence"),
    ("RRULE:FREQ=MONTHLY;BYDAY=MO;BYSETPOS=6", "no occurrence between 1900 and 9999"),
    ("RRULE:FREQ=SECONDLY;BYSETPOS=2", "BYSETPOS=2 but each second holds 1 occurrence(s)"),
    ("RRULE:FREQ=DAILY\nEXRULE:FREQ=WEEKLY", "uses EXRULE, which RFC 5545 deprecated; list"),
    ("RRULE:FREQ=DAILY\nFOO:bar", 'has the line "FOO:bar"; a rule has only DTSTART, RRULE'),
    ("RRULE:FREQ=DAILY\nRRULE", 'has the line "RRULE"'),
    ("RRULE:FREQ=DAILY;BYEASTER=0", "has the rule part BYEASTER, which RFC 5545 does not know"),
    ("RRULE:FREQ=DAILY;BYHOUR", 'has the rule part "BYHOUR"; write NAME=value parts'),
    ("RRULE:FREQ=DAILY;FREQ=DAILY", "gives FREQ twice; keep one"),
    ("RRULE:BYHOUR=9", "has no FREQ; use YEARLY, MONTHLY"),
    (
        "RRULE:FREQ=MILLISECONDLY",
        "has FREQ=MILLISECONDLY, not an RFC 5545 frequency; use YEARLY, MONTHLY, WEEKLY, DAILY, "
        "HOURLY, MINUTELY or SECONDLY (there is no frequency finer than a second)",
    ),
    (
        "DTSTART:20260101T090000.5\nRRULE:FREQ=DAILY",
        "has DTSTART 20260101T090000.5 with a fraction of a second; ticks are whole seconds "
        "(nothing finer than SECONDLY): write 20260101T090000",
    ),
    ("RRULE:FREQ=DAILY\nRDATE:20260101T090000.250Z", "write 20260101T090000Z"),
    ("RRULE:FREQ=DAILY;BYSECOND=0.5", '"0.5" is not a whole number from 0 to 59 (ticks are'),
    ("DTSTART:18991231T000000\nRRULE:FREQ=DAILY", "DTSTART 18991231T000000 is before year 1900"),
    (
        "DTSTART;TZID=America/New_York:99991231T200000\nRRULE:FREQ=DAILY",
        "DTSTART 99991231T200000 is past year 9999 in UTC; give an instant in years 1900-9999",
    ),
    ("RRULE:FREQ=DAILY;UNTIL=18990101T000000Z", "UNTIL 18990101T000000Z is before year 1900"),
    ("RRULE:FREQ=DAILY\nEXDATE:18990101T000000", "EXDATE 18990101T000000 is before year 1900"),
    ("DTSTART:20261301T000000\nRRULE:FREQ=DAILY", "DTSTART 20261301T000000, which is not a date"),
    (
        "DTSTART;TZID=Mars/Olympus_Mons:20260101T090000\nRRULE:FREQ=DAILY",
        'has TZID "Mars/Olympus_Mons", which is not an IANA zone; use e.g. "Europe/Berlin"',
    ),
    ("RRULE:FREQ=DAILY\nRDATE;TZID=Nowhere:20260101T090000", 'has RDATE;TZID "Nowhere", which'),
    (
        "RRULE:FREQ=DAILY;COUNT=5",
        "has COUNT=5 but no DTSTART, so nothing says where counting starts; add a DTSTART line",
    ),
    (
        "RRULE:FREQ=WEEKLY;INTERVAL=2",
        "has INTERVAL=2 but no DTSTART, so nothing says which weeks it counts from; add a DTSTART",
    ),
    ("RRULE:FREQ=HOURLY;INTERVAL=5", "has INTERVAL=5 but no DTSTART"),
    ("DTSTART:20260101T000000\nRRULE:FREQ=DAILY;COUNT=100001", "COUNT=100001; give a whole"),
    (
        "DTSTART:20260101T000000\nRRULE:FREQ=YEARLY;INTERVAL=101",
        "INTERVAL=101; give a whole number from 1 to 100",
    ),
    ("DTSTART:20260101T000000\nRRULE:FREQ=DAILY;INTERVAL=0", "INTERVAL=0; give a whole"),
    (
        "DTSTART:20260101T000000\nRRULE:FREQ=DAILY;COUNT=2;UNTIL=20270101T000000",
        "has both COUNT and UNTIL, which RFC 5545 forbids; keep one",
    ),
    ("RRULE:FREQ=WEEKLY;BYDAY=1MO", "a numbered weekday (1MO) needs FREQ=MONTHLY or YEARLY"),
    ("RRULE:FREQ=MONTHLY;BYDAY=6MO", "6MO counts within the month, so its number must be 1 to 5"),
    ("RRULE:FREQ=YEARLY;BYMONTH=9;BYDAY=21MO", "21MO counts within the month, so its number"),
    (
        "RRULE:FREQ=YEARLY;BYDAY=-54MO",
        "-54MO counts within the year, so its number must be 1 to 53",
    ),
    ("RRULE:FREQ=MONTHLY;BYDAY=MO(+1)", '"MO(+1)" is not a weekday such as MO, 1MO or -1FR'),
    ("RRULE:FREQ=DAILY;BYHOUR=24", 'has BYHOUR=24: "24" is not a whole number from 0 to 23'),
    ("RRULE:FREQ=MONTHLY;BYMONTHDAY=0", '"0" is not a whole number from 1 to 31 or -31 to -1'),
    ("RRULE:FREQ=YEARLY;BYMONTH=13", '"13" is not a whole number from 1 to 12'),
    ("RRULE:FREQ=DAILY;WKST=XX", "has WKST=XX; use one of MO, TU"),
    (
        "DTSTART:20260105T090000\nRRULE:FREQ=DAILY;UNTIL=20260101T000000",
        "ends (UNTIL=20260101T000000) before its first occurrence, 2026-01-05T09:00:00",
    ),
    ("DTSTART:20260101T090000", "has no RRULE or RDATE line; add e.g. RRULE:FREQ=DAILY"),
    ("DTSTART;VALUE=DATE:20260101\nRRULE:FREQ=DAILY", "DTSTART;VALUE=DATE: only date-times"),
    ("DTSTART:20260101\nRRULE:FREQ=DAILY", 'has DTSTART "20260101", not a date-time (a date alone'),
    ("DTSTART:2026-01-01T09:00:00\nRRULE:FREQ=DAILY", "write YYYYMMDDTHHMMSS (local time in UTC)"),
    ("RRULE;X-FOO=1:FREQ=DAILY", "has the parameter RRULE;X-FOO=1; only TZID="),
    ("DTSTART:20260101T000000\nDTSTART:20260102T000000\nRRULE:FREQ=DAILY", "more than one"),
    (
        "DTSTART:20260101T010000\nRRULE:FREQ=HOURLY;INTERVAL=2;BYHOUR=2",
        "is a rule dateutil refuses (Invalid rrule byxxx generates an empty set.)",
    ),
    (
        "DTSTART:20260105T090000\nRRULE:FREQ=DAILY;COUNT=1\nEXDATE:20260105T090000",
        "has no tick in years 1900-9999 once EXDATE is applied",
    ),
    ("RRULE:FREQ=DAILY\n" + "RRULE:FREQ=DAILY\n" * 20, "has 21 RRULE lines; give at most 20"),
]


@pytest.mark.parametrize(("text", "message"), REFUSALS)
def test_refusals_name_the_rule_and_the_fix(text: str, message: str) -> None:
    started = time.perf_counter()
    with pytest.raises(SpecError) as caught:
        parse_rrule(text, "UTC")
    shown = " ".join(line.strip() for line in text.strip().splitlines())
    assert str(caught.value).startswith(f'rule "{shown[:197]}')
    assert message in str(caught.value)
    assert time.perf_counter() - started < 5  # refused while reading, never by a long walk


def test_an_empty_rule_and_a_bad_schedule_zone_are_refused() -> None:
    with pytest.raises(SpecError, match="a recurrence rule is empty"):
        parse_rrule(" \n ", "UTC")
    with pytest.raises(SpecError, match='has tz "Bogota", which is not an IANA zone'):
        parse_rrule("RRULE:FREQ=DAILY", "Bogota")


# --- Cost ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["DTSTART:20160101T000000\nRRULE:FREQ=MINUTELY", f"DTSTART:20160101T090000\n{SPEC_RULE}"],
)
def test_a_query_costs_the_same_ten_years_after_dtstart(text: str) -> None:
    """Plain dateutil walks every occurrence since DTSTART (5 million minutes here, about ten
    seconds per query); the restarted rule answers in microseconds, far or near."""
    spec = spec_of(text, BERLIN)
    near, far = ms("2016-01-02T00:00:00+00:00"), ms("2026-01-01T00:00:00+00:00")
    costs = []
    for after in (near, far):
        started = time.perf_counter()
        for offset in range(200):
            assert next_rrule_ms(spec, after + offset * 7_919_000) is not None
        costs.append(time.perf_counter() - started)
    assert costs[1] < 1.0
    assert costs[1] < 5 * costs[0] + 0.05


# --- Words ---------------------------------------------------------------------------------------

DESCRIPTIONS = [
    (SPEC_RULE, BERLIN, "monthly on the last Friday at 09:00 (Europe/Berlin)"),
    (
        "RRULE:FREQ=WEEKLY;BYDAY=MO,WE;BYHOUR=8;BYMINUTE=30",
        "UTC",
        "weekly on Monday and Wednesday at 08:30 (UTC)",
    ),
    ("RRULE:FREQ=DAILY", NEW_YORK, "daily at 00:00 (America/New_York)"),
    (
        "RRULE:FREQ=DAILY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9,17",
        "UTC",
        "daily on weekdays at 09:00 and 17:00 (UTC)",
    ),
    (
        "DTSTART:20260105T090000\nRRULE:FREQ=WEEKLY;INTERVAL=2",
        "UTC",
        "every 2 weeks on Monday at 09:00, starting 2026-01-05 09:00 (UTC)",
    ),
    (
        "DTSTART:20260315T090000\nRRULE:FREQ=YEARLY",
        "UTC",
        "yearly on March 15 at 09:00, starting 2026-03-15 09:00 (UTC)",
    ),
    (
        "RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU;BYHOUR=2",
        "UTC",
        "yearly on the last Sunday of March at 02:00 (UTC)",
    ),
    ("RRULE:FREQ=HOURLY;BYMINUTE=15", "UTC", "hourly at :15 (UTC)"),
    ("RRULE:FREQ=HOURLY;BYMINUTE=0,30;BYSECOND=5", "UTC", "hourly at :00:05 and :30:05 (UTC)"),
    ("RRULE:FREQ=MINUTELY;INTERVAL=15", "UTC", "every 15 minutes (UTC)"),
    ("RRULE:FREQ=SECONDLY;INTERVAL=30", "UTC", "every 30 seconds (UTC)"),
    (
        "RRULE:FREQ=MONTHLY;BYMONTHDAY=1,15,-1;BYHOUR=12",
        "UTC",
        "monthly on days 1 and 15 and the last day at 12:00 (UTC)",
    ),
    (
        "RRULE:FREQ=MONTHLY;BYDAY=1MO,-2FR",
        "UTC",
        "monthly on the first Monday and the second-to-last Friday at 00:00 (UTC)",
    ),
    (
        "DTSTART:20260101T090000\nRRULE:FREQ=DAILY;COUNT=10",
        "UTC",
        "daily at 09:00, 10 times, starting 2026-01-01 09:00 (UTC)",
    ),
    (
        "RRULE:FREQ=DAILY;BYHOUR=9;UNTIL=20270630T235959",
        "UTC",
        "daily at 09:00, until 2027-06-30 (UTC)",
    ),
    (
        "RRULE:FREQ=DAILY;BYHOUR=9;UNTIL=20270630T120000",
        "UTC",
        "daily at 09:00, until 2027-06-30 12:00 (UTC)",
    ),
    (
        "DTSTART:20260105T090000\nRRULE:FREQ=DAILY\nRDATE:20260110T120000\nEXDATE:20260107T090000",
        "UTC",
        "daily at 09:00, starting 2026-01-05 09:00, plus 2026-01-10 12:00, "
        "except 2026-01-07 09:00 (UTC)",
    ),
    (
        "DTSTART:20260101T090000\nRRULE:FREQ=WEEKLY\nRRULE:FREQ=MONTHLY;BYMONTHDAY=1;BYHOUR=12",
        "UTC",
        "weekly on Thursday at 09:00, and monthly on day 1 at 12:00, "
        "starting 2026-01-01 09:00 (UTC)",
    ),
    (
        "DTSTART:20260101T090000\nRDATE:20260101T090000,20260201T090000",
        "UTC",
        "on 2026-01-01 09:00 and 2026-02-01 09:00 (UTC)",
    ),
    (
        "RRULE:FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
        BERLIN,
        'rule "RRULE:FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1" (Europe/Berlin)',
    ),
    (
        "DTSTART:20260101T000000\nRRULE:FREQ=YEARLY;BYWEEKNO=20",
        "UTC",
        'rule "DTSTART:20260101T000000 RRULE:FREQ=YEARLY;BYWEEKNO=20" (UTC)',
    ),
]


@pytest.mark.parametrize(("text", "tz", "words"), DESCRIPTIONS)
def test_describe_rrule(text: str, tz: str, words: str) -> None:
    assert describe_rrule(spec_of(text, tz)) == words
