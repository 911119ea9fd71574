"""The DST rule book (SPEC §5, :mod:`celery_durable_beat.schedules.dst`), one row per case.

Each row: a cron expression, its zone, the instant a search starts from (exclusive), and the
instants that follow, written as they read on the zone's own clock, offset included. The 2026
transitions used:

* America/New_York: Mar 8 02:00 EST -> 03:00 EDT (07:00Z); Nov 1 02:00 EDT -> 01:00 EST (06:00Z)
* Europe/Berlin: Mar 29 02:00 CET -> 03:00 CEST (01:00Z); Oct 25 03:00 CEST -> 02:00 CET (01:00Z)
* Australia/Lord_Howe (a 30-minute shift): Apr 5 02:00 +11:00 -> 01:30 +10:30 (Apr 4 15:00Z);
  Oct 4 02:00 +10:30 -> 02:30 +11:00 (Oct 3 15:30Z)
* Asia/Kathmandu: +05:45 all year; the same dates must behave like any other day.
"""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise
from typing import NamedTuple
from zoneinfo import ZoneInfo

import pytest

from celery_durable_beat.schedules import CronSpec, next_tick, parse_schedule, ticks_between
from celery_durable_beat.schedules.dst import (
    WallKind,
    classify,
    fold_bounds,
    gap_end,
    instant_s,
    transition_near,
    wall_of,
    zone,
)
from celery_durable_beat.schedules.render import tick_isoformat

from ._support import TRANSITIONS_MS, ms, oracle_ticks

pytestmark = pytest.mark.unit

NY, BERLIN, LORD_HOWE, KATHMANDU = (
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
)


class Row(NamedTuple):
    id: str
    expr: str
    tz: str
    start: str
    expected: tuple[str, ...]


ROWS = [
    # --- New York, spring forward (02:00-03:00 does not exist on Mar 8) ---
    Row(
        "ny-gap-fixed",
        "30 2 * * *",
        NY,
        "2026-03-07T12:00:00-05:00",
        ("2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"),
    ),
    Row(
        "ny-gap-fixed-on-the-hour",
        "0 2 * * *",
        NY,
        "2026-03-07T12:00:00-05:00",
        ("2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"),
    ),
    Row(
        "ny-gap-fixed-several-times-collapse",
        "0,30 2 * * *",
        NY,
        "2026-03-07T12:00:00-05:00",
        ("2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00", "2026-03-09T02:30:00-04:00"),
    ),
    Row(
        "ny-gap-fixed-meets-a-real-03:00",
        "0 2,3 * * *",
        NY,
        "2026-03-07T12:00:00-05:00",
        ("2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00", "2026-03-09T03:00:00-04:00"),
    ),
    Row(
        "ny-gap-fixed-then-later-same-day",
        "30 2,3 * * *",
        NY,
        "2026-03-08T00:00:00-05:00",
        ("2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00"),
    ),
    Row(
        "ny-gap-step-minute",
        "*/30 * * * *",
        NY,
        "2026-03-08T01:00:00-05:00",
        ("2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"),
    ),
    Row(
        "ny-gap-wildcard-hour",
        "30 * * * *",
        NY,
        "2026-03-08T01:00:00-05:00",
        ("2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00", "2026-03-08T04:30:00-04:00"),
    ),
    Row(
        "ny-gap-step-hour-nothing-inside",
        "15 */2 * * *",
        NY,
        "2026-03-08T00:30:00-05:00",
        ("2026-03-08T04:15:00-04:00", "2026-03-08T06:15:00-04:00"),
    ),
    Row(
        "ny-gap-wildcard-minute-fixed-hour",
        "*/20 2 * * *",
        NY,
        "2026-03-07T12:00:00-05:00",
        ("2026-03-09T02:00:00-04:00", "2026-03-09T02:20:00-04:00"),
    ),
    Row(
        "ny-gap-hourly",
        "@hourly",
        NY,
        "2026-03-08T00:30:00-05:00",
        ("2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"),
    ),
    Row(
        "ny-gap-seconds-step",
        "*/20 * * * * *",
        NY,
        "2026-03-08T01:59:20-05:00",
        ("2026-03-08T01:59:40-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:00:20-04:00"),
    ),
    Row(
        "ny-gap-seconds-fixed",
        "10 30 2 * * *",
        NY,
        "2026-03-07T12:00:00-05:00",
        ("2026-03-08T03:00:00-04:00", "2026-03-09T02:30:10-04:00"),
    ),
    Row(
        "ny-gap-from-transition-instant",
        "*/30 * * * *",
        NY,
        "2026-03-08T03:00:00-04:00",
        ("2026-03-08T03:30:00-04:00",),
    ),
    Row(
        "ny-gap-fixed-from-transition-instant",
        "30 2 * * *",
        NY,
        "2026-03-08T03:00:00-04:00",
        ("2026-03-09T02:30:00-04:00",),
    ),
    Row(
        "ny-gap-fixed-1ms-before-transition",
        "30 2 * * *",
        NY,
        "2026-03-08T01:59:59.999-05:00",
        ("2026-03-08T03:00:00-04:00",),
    ),
    Row(
        "ny-gap-step-1ms-before-transition",
        "*/30 * * * *",
        NY,
        "2026-03-08T01:59:59.999-05:00",
        ("2026-03-08T03:00:00-04:00",),
    ),
    Row(
        "ny-gap-step-1ms-after-transition",
        "*/30 * * * *",
        NY,
        "2026-03-08T03:00:00.001-04:00",
        ("2026-03-08T03:30:00-04:00",),
    ),
    # --- New York, fall back (01:00-02:00 happens twice on Nov 1) ---
    Row(
        "ny-fold-fixed-first-pass-only",
        "30 1 * * *",
        NY,
        "2026-10-31T12:00:00-04:00",
        ("2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"),
    ),
    Row(
        "ny-fold-step-minute-both-passes",
        "*/30 * * * *",
        NY,
        "2026-11-01T00:45:00-04:00",
        (
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-01T02:00:00-05:00",
        ),
    ),
    Row(
        "ny-fold-hourly-both-passes",
        "@hourly",
        NY,
        "2026-11-01T00:30:00-04:00",
        ("2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"),
    ),
    Row(
        "ny-fold-wildcard-hour",
        "15 * * * *",
        NY,
        "2026-11-01T00:30:00-04:00",
        ("2026-11-01T01:15:00-04:00", "2026-11-01T01:15:00-05:00", "2026-11-01T02:15:00-05:00"),
    ),
    Row(
        "ny-fold-wildcard-minute-fixed-hour",
        "*/20 1 * * *",
        NY,
        "2026-11-01T00:30:00-04:00",
        (
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:20:00-04:00",
            "2026-11-01T01:40:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:20:00-05:00",
            "2026-11-01T01:40:00-05:00",
            "2026-11-02T01:00:00-05:00",
        ),
    ),
    Row(
        "ny-fold-from-first-pass",
        "*/30 * * * *",
        NY,
        "2026-11-01T01:10:00-04:00",
        ("2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00"),
    ),
    Row(
        "ny-fold-from-late-first-pass",
        "*/30 * * * *",
        NY,
        "2026-11-01T01:45:00-04:00",
        ("2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"),
    ),
    Row(
        "ny-fold-from-first-pass-nothing-in-fold",
        "0 */2 * * *",
        NY,
        "2026-11-01T01:30:00-04:00",
        ("2026-11-01T02:00:00-05:00", "2026-11-01T04:00:00-05:00"),
    ),
    Row(
        "ny-fold-from-second-pass",
        "*/30 * * * *",
        NY,
        "2026-11-01T01:10:00-05:00",
        ("2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"),
    ),
    Row(
        "ny-fold-from-transition-instant",
        "*/30 * * * *",
        NY,
        "2026-11-01T01:00:00-05:00",
        ("2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"),
    ),
    Row(
        "ny-fold-1ms-before-transition",
        "*/30 * * * *",
        NY,
        "2026-11-01T01:59:59.999-04:00",
        ("2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00"),
    ),
    Row(
        "ny-fold-ms-into-first-pass-tick",
        "*/30 * * * *",
        NY,
        "2026-11-01T01:30:00.001-04:00",
        ("2026-11-01T01:00:00-05:00",),
    ),
    Row(
        "ny-fold-ms-before-second-pass-tick",
        "*/30 * * * *",
        NY,
        "2026-11-01T01:29:59.999-05:00",
        ("2026-11-01T01:30:00-05:00",),
    ),
    Row(
        "ny-fold-fixed-from-first-pass-before",
        "30 1 * * *",
        NY,
        "2026-11-01T01:10:00-04:00",
        ("2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"),
    ),
    Row(
        "ny-fold-fixed-from-first-pass-after",
        "30 1 * * *",
        NY,
        "2026-11-01T01:45:00-04:00",
        ("2026-11-02T01:30:00-05:00",),
    ),
    Row(
        "ny-fold-fixed-from-second-pass",
        "30 1 * * *",
        NY,
        "2026-11-01T01:10:00-05:00",
        ("2026-11-02T01:30:00-05:00",),
    ),
    Row(
        "ny-fold-fixed-from-transition-instant",
        "30 1 * * *",
        NY,
        "2026-11-01T01:00:00-05:00",
        ("2026-11-02T01:30:00-05:00",),
    ),
    Row(
        "ny-fold-seconds-step",
        "*/20 * * * * *",
        NY,
        "2026-11-01T01:59:20-04:00",
        ("2026-11-01T01:59:40-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:00:20-05:00"),
    ),
    Row(
        "ny-fold-seconds-fixed-minute-hour",
        "*/30 59 1 * * *",
        NY,
        "2026-11-01T01:58:00-04:00",
        ("2026-11-01T01:59:00-04:00", "2026-11-01T01:59:30-04:00", "2026-11-02T01:59:00-05:00"),
    ),
    # --- Berlin ---
    Row(
        "berlin-gap-fixed",
        "30 2 * * *",
        BERLIN,
        "2026-03-28T12:00:00+01:00",
        ("2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"),
    ),
    Row(
        "berlin-gap-step",
        "*/5 * * * *",
        BERLIN,
        "2026-03-29T01:50:00+01:00",
        ("2026-03-29T01:55:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:05:00+02:00"),
    ),
    Row(
        "berlin-gap-hourly",
        "@hourly",
        BERLIN,
        "2026-03-29T00:30:00+01:00",
        ("2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00"),
    ),
    Row(
        "berlin-fold-fixed",
        "30 2 * * *",
        BERLIN,
        "2026-10-24T12:00:00+02:00",
        ("2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"),
    ),
    Row(
        "berlin-fold-step",
        "*/30 * * * *",
        BERLIN,
        "2026-10-25T01:45:00+02:00",
        (
            "2026-10-25T02:00:00+02:00",
            "2026-10-25T02:30:00+02:00",
            "2026-10-25T02:00:00+01:00",
            "2026-10-25T02:30:00+01:00",
            "2026-10-25T03:00:00+01:00",
        ),
    ),
    Row(
        "berlin-fold-hourly",
        "@hourly",
        BERLIN,
        "2026-10-25T01:30:00+02:00",
        ("2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"),
    ),
    Row(
        "berlin-fold-seconds-step-minute",
        "0 */30 2 * * *",
        BERLIN,
        "2026-10-25T01:59:00+02:00",
        (
            "2026-10-25T02:00:00+02:00",
            "2026-10-25T02:30:00+02:00",
            "2026-10-25T02:00:00+01:00",
            "2026-10-25T02:30:00+01:00",
            "2026-10-26T02:00:00+01:00",
        ),
    ),
    Row(
        "berlin-daily-unaffected",
        "@daily",
        BERLIN,
        "2026-10-24T12:00:00+02:00",
        ("2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00"),
    ),
    # --- Lord Howe: the shift is 30 minutes ---
    Row(
        "lord-howe-gap-fixed",
        "15 2 * * *",
        LORD_HOWE,
        "2026-10-03T12:00:00+10:30",
        ("2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"),
    ),
    Row(
        "lord-howe-gap-fixed-meets-a-real-02:30",
        "15,30 2 * * *",
        LORD_HOWE,
        "2026-10-03T12:00:00+10:30",
        ("2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00", "2026-10-05T02:30:00+11:00"),
    ),
    Row(
        "lord-howe-gap-step",
        "*/15 * * * *",
        LORD_HOWE,
        "2026-10-04T01:40:00+10:30",
        ("2026-10-04T01:45:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"),
    ),
    Row(
        "lord-howe-gap-seconds-step-minute",
        "0 */10 2 * * *",
        LORD_HOWE,
        "2026-10-04T01:55:00+10:30",
        ("2026-10-04T02:30:00+11:00", "2026-10-04T02:40:00+11:00"),
    ),
    Row(
        "lord-howe-gap-hourly",
        "@hourly",
        LORD_HOWE,
        "2026-10-04T00:30:00+10:30",
        ("2026-10-04T01:00:00+10:30", "2026-10-04T03:00:00+11:00"),
    ),
    Row(
        "lord-howe-fold-fixed",
        "45 1 * * *",
        LORD_HOWE,
        "2026-04-04T12:00:00+11:00",
        ("2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"),
    ),
    Row(
        "lord-howe-fold-fixed-at-fold-start",
        "30 1 * * *",
        LORD_HOWE,
        "2026-04-04T12:00:00+11:00",
        ("2026-04-05T01:30:00+11:00", "2026-04-06T01:30:00+10:30"),
    ),
    Row(
        "lord-howe-fold-step",
        "*/15 * * * *",
        LORD_HOWE,
        "2026-04-05T01:10:00+11:00",
        (
            "2026-04-05T01:15:00+11:00",
            "2026-04-05T01:30:00+11:00",
            "2026-04-05T01:45:00+11:00",
            "2026-04-05T01:30:00+10:30",
            "2026-04-05T01:45:00+10:30",
            "2026-04-05T02:00:00+10:30",
        ),
    ),
    Row(
        "lord-howe-fold-hourly-no-repeat",
        "@hourly",
        LORD_HOWE,
        "2026-04-05T00:30:00+11:00",
        ("2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30"),
    ),
    Row(
        "lord-howe-fold-from-second-pass",
        "*/15 * * * *",
        LORD_HOWE,
        "2026-04-05T01:35:00+10:30",
        ("2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30"),
    ),
    # --- Kathmandu: no DST, a +05:45 offset ---
    Row(
        "kathmandu-fixed",
        "30 2 * * *",
        KATHMANDU,
        "2026-03-08T00:00:00+05:45",
        ("2026-03-08T02:30:00+05:45", "2026-03-09T02:30:00+05:45"),
    ),
    Row(
        "kathmandu-step",
        "*/30 * * * *",
        KATHMANDU,
        "2026-11-01T00:45:00+05:45",
        ("2026-11-01T01:00:00+05:45", "2026-11-01T01:30:00+05:45", "2026-11-01T02:00:00+05:45"),
    ),
    Row(
        "kathmandu-hourly-ms",
        "@hourly",
        KATHMANDU,
        "2026-10-04T01:10:00.250+05:45",
        ("2026-10-04T02:00:00+05:45", "2026-10-04T03:00:00+05:45"),
    ),
    Row(
        "kathmandu-seconds",
        "*/20 * * * * *",
        KATHMANDU,
        "2026-03-29T01:59:20+05:45",
        ("2026-03-29T01:59:40+05:45", "2026-03-29T02:00:00+05:45", "2026-03-29T02:00:20+05:45"),
    ),
    Row(
        "kathmandu-weekdays",
        "30 2 * * 1-5",
        KATHMANDU,
        "2026-04-03T12:00:00+05:45",
        ("2026-04-06T02:30:00+05:45", "2026-04-07T02:30:00+05:45"),
    ),
]


def _spec(row: Row) -> CronSpec:
    spec = parse_schedule(row.expr, row.tz).spec
    assert isinstance(spec, CronSpec)
    return spec


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_next_tick_sequence(row: Row) -> None:
    spec = _spec(row)
    got, cursor = [], ms(row.start)
    for _ in row.expected:
        cursor = next_tick(spec, cursor)
        got.append(tick_isoformat(cursor, row.tz))
    assert got == list(row.expected)
    assert [ms(text) for text in got] == sorted({ms(text) for text in got})


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_enumeration_agrees(row: Row) -> None:
    expected = [ms(text) for text in row.expected]
    assert ticks_between(_spec(row), ms(row.start), expected[-1]) == expected


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_oracle_agrees(row: Row) -> None:
    """The table itself is checked against the brute-force reading of SPEC §5."""
    expected = [ms(text) for text in row.expected]
    assert oracle_ticks(_spec(row).fields, row.tz, ms(row.start), expected[-1]) == expected


@pytest.mark.parametrize(
    ("expr", "tz", "transition"),
    [
        ("*/30 * * * *", NY, "ny-fall"),
        ("@hourly", NY, "ny-fall"),
        ("*/15 * * * *", LORD_HOWE, "lord-howe-fall"),
        ("*/10 * * * *", BERLIN, "berlin-fall"),
        ("*/30 * * * *", NY, "ny-spring"),
        ("@hourly", BERLIN, "berlin-spring"),
        ("*/15 * * * *", LORD_HOWE, "lord-howe-spring"),
        ("*/5 * * * * *", KATHMANDU, "ny-fall"),
    ],
)
def test_wildcard_keeps_real_time_spacing(expr: str, tz: str, transition: str) -> None:
    """A step that divides the shift keeps its spacing in real time: no double, no hole."""
    spec = _spec(Row("", expr, tz, "", ()))
    around = TRANSITIONS_MS[transition]
    ticks = ticks_between(spec, around - 3 * 3_600_000, around + 3 * 3_600_000)
    assert len({b - a for a, b in pairwise(ticks)}) == 1


# --- the rule book's building blocks -------------------------------------------------------

WALLS = [
    (NY, datetime(2026, 3, 8, 2, 30), WallKind.GAP),
    (NY, datetime(2026, 3, 8, 3, 0), WallKind.NORMAL),
    (NY, datetime(2026, 3, 8, 1, 59, 59), WallKind.NORMAL),
    (NY, datetime(2026, 11, 1, 1, 0), WallKind.FOLD),
    (NY, datetime(2026, 11, 1, 1, 59, 59), WallKind.FOLD),
    (NY, datetime(2026, 11, 1, 2, 0), WallKind.NORMAL),
    (BERLIN, datetime(2026, 3, 29, 2, 0), WallKind.GAP),
    (BERLIN, datetime(2026, 10, 25, 2, 30), WallKind.FOLD),
    (LORD_HOWE, datetime(2026, 10, 4, 2, 15), WallKind.GAP),
    (LORD_HOWE, datetime(2026, 10, 4, 2, 30), WallKind.NORMAL),
    (LORD_HOWE, datetime(2026, 4, 5, 1, 30), WallKind.FOLD),
    (LORD_HOWE, datetime(2026, 4, 5, 1, 29, 59), WallKind.NORMAL),
    (KATHMANDU, datetime(2026, 3, 8, 2, 30), WallKind.NORMAL),
    ("UTC", datetime(2026, 11, 1, 1, 30), WallKind.NORMAL),
]


@pytest.mark.parametrize(("tz", "wall", "kind"), WALLS)
def test_classify(tz: str, wall: datetime, kind: WallKind) -> None:
    assert classify(wall, zone(tz)) is kind


TRANSITION_WALLS = [
    (NY, datetime(2026, 3, 8, 2, 30), "ny-spring", "2026-03-08T03:00:00"),
    (NY, datetime(2026, 11, 1, 1, 15), "ny-fall", "2026-11-01T01:00:00"),
    (BERLIN, datetime(2026, 3, 29, 2, 59, 59), "berlin-spring", "2026-03-29T03:00:00"),
    (BERLIN, datetime(2026, 10, 25, 2, 0), "berlin-fall", "2026-10-25T02:00:00"),
    (LORD_HOWE, datetime(2026, 10, 4, 2, 0), "lord-howe-spring", "2026-10-04T02:30:00"),
    (LORD_HOWE, datetime(2026, 4, 5, 1, 59, 59), "lord-howe-fall", "2026-04-05T01:30:00"),
]


@pytest.mark.parametrize(("tz", "wall", "transition", "wall_after"), TRANSITION_WALLS)
def test_transition_near(tz: str, wall: datetime, transition: str, wall_after: str) -> None:
    change_s = transition_near(wall, zone(tz))
    assert change_s * 1000 == TRANSITIONS_MS[transition]
    assert wall_of(change_s, zone(tz))[0] == datetime.fromisoformat(wall_after)


@pytest.mark.parametrize(
    ("tz", "wall", "start", "end"),
    [
        (NY, datetime(2026, 11, 1, 1, 30), datetime(2026, 11, 1, 1), datetime(2026, 11, 1, 2)),
        (BERLIN, datetime(2026, 10, 25, 2), datetime(2026, 10, 25, 2), datetime(2026, 10, 25, 3)),
        (
            LORD_HOWE,
            datetime(2026, 4, 5, 1, 45),
            datetime(2026, 4, 5, 1, 30),
            datetime(2026, 4, 5, 2),
        ),
    ],
)
def test_fold_bounds(tz: str, wall: datetime, start: datetime, end: datetime) -> None:
    assert fold_bounds(wall, zone(tz)) == (start, end)


@pytest.mark.parametrize(
    ("tz", "wall", "transition", "end_wall"),
    [
        (NY, datetime(2026, 3, 8, 2, 0), "ny-spring", datetime(2026, 3, 8, 3)),
        (
            LORD_HOWE,
            datetime(2026, 10, 4, 2, 29, 59),
            "lord-howe-spring",
            datetime(2026, 10, 4, 2, 30),
        ),
    ],
)
def test_gap_end(tz: str, wall: datetime, transition: str, end_wall: datetime) -> None:
    assert gap_end(wall, zone(tz)) == (TRANSITIONS_MS[transition] // 1000, end_wall)


def test_wall_of_reports_the_pass() -> None:
    tz = zone(NY)
    first = ms("2026-11-01T01:30:00-04:00") // 1000
    second = ms("2026-11-01T01:30:00-05:00") // 1000
    assert wall_of(first, tz) == (datetime(2026, 11, 1, 1, 30), 0)
    assert wall_of(second, tz) == (datetime(2026, 11, 1, 1, 30), 1)
    assert instant_s(datetime(2026, 11, 1, 1, 30), tz, 0) == first
    assert instant_s(datetime(2026, 11, 1, 1, 30), tz, 1) == second


def test_zone_is_cached_zoneinfo() -> None:
    assert zone(LORD_HOWE) is zone(LORD_HOWE)
    assert zone(LORD_HOWE) == ZoneInfo(LORD_HOWE)
