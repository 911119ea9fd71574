"""Day of month and day of week together (SPEC §5, first paragraph).

A Celery ``crontab`` keeps Celery's meaning: both day fields must match. A cron string follows
crontab(5): when both day fields are restricted (neither starts with ``*``) a day matching
either fires; when either starts with ``*`` both must match. Every expectation here is computed
independently of the package: by plain loops over the calendar, with Celery's own parsed day
sets for the crontab cases.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab

from celery_durable_beat.model import Definition
from celery_durable_beat.schedules.describe import describe
from celery_durable_beat.schedules.spec import (
    CronSpec,
    DayRule,
    parse_schedule,
    spec_from_json,
    spec_to_json,
)
from celery_durable_beat.testing import FrozenBeat

pytestmark = pytest.mark.unit

BERLIN = ZoneInfo("Europe/Berlin")


def _days_of(year: int, keep: Callable[[date], bool]) -> list[date]:
    """Every day of ``year`` that ``keep`` accepts, by walking the calendar."""
    day, found = date(year, 1, 1), []
    while day.year == year:
        if keep(day):
            found.append(day)
        day += timedelta(days=1)
    return found


def _celery_days(value: crontab) -> Callable[[date], bool]:
    """Celery's own reading of a crontab's day fields (its parsed sets), combined with AND."""

    def keep(day: date) -> bool:
        return (
            day.day in value.day_of_month
            and day.month in value.month_of_year
            and day.isoweekday() % 7 in value.day_of_week
        )

    return keep


def _fired_days(schedule: object, year: int = 2026, tz: str = "Europe/Berlin") -> list[date]:
    """The local dates a schedule fires on through FrozenBeat, over one whole year."""
    app = Celery("days", set_as_current=False)
    app.conf.timezone = tz
    app.conf.beat_schedule = {"job": {"task": "proj.job", "schedule": schedule}}
    start = datetime(year, 1, 1, tzinfo=ZoneInfo(tz)).astimezone(timezone.utc)
    with FrozenBeat(app, start=start) as beat:
        ticks = beat.advance(timedelta(days=365))
    return [t.tick.astimezone(ZoneInfo(tz)).date() for t in ticks]


# -- Celery crontab objects: both day fields must match -----------------------------------------
def test_friday_the_13th_crontab_fires_three_times_in_2026() -> None:
    value = crontab(minute=30, hour=6, day_of_month="13", day_of_week="fri")
    expected = _days_of(2026, _celery_days(value))
    assert expected == [date(2026, 2, 13), date(2026, 3, 13), date(2026, 11, 13)]
    assert _fired_days(value) == expected


def test_first_monday_crontab_fires_once_a_month() -> None:
    value = crontab(minute=0, hour=9, day_of_month="1-7", day_of_week="mon")
    expected = _days_of(2026, _celery_days(value))
    assert len(expected) == 12 and all(d.weekday() == 0 and d.day <= 7 for d in expected)
    assert _fired_days(value) == expected


def test_crontab_agrees_with_celerys_own_is_due_each_day() -> None:
    """Celery's ``is_due`` on each day at 06:30 says whether stock beat would run that day."""
    value = crontab(minute=30, hour=6, day_of_month="1-7", day_of_week="mon,fri")
    app = Celery("due", set_as_current=False)
    app.conf.timezone = "Europe/Berlin"
    app.conf.enable_utc = True
    value.app = app
    by_celery = []
    for day in _days_of(2026, lambda _: True):
        at = datetime(day.year, day.month, day.day, 6, 30, tzinfo=BERLIN)
        value.nowfun = lambda at=at: at
        if value.is_due(at - timedelta(minutes=1)).is_due:
            by_celery.append(day)
    assert _fired_days(value) == by_celery


# -- cron strings: crontab(5) ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expr", "keep"),
    [
        ("30 6 13 * 5", lambda d: d.day == 13 or d.weekday() == 4),  # both restricted: OR
        ("0 9 */10 * 1", lambda d: d.day in (1, 11, 21, 31) and d.weekday() == 0),  # * : AND
        ("0 9 1-7 * */2", lambda d: d.day <= 7 and d.isoweekday() % 7 in (0, 2, 4, 6)),
        ("0 9 1-31 * 1", lambda d: True),  # OR with a full day-of-month range: every day
        ("0 9 13 * *", lambda d: d.day == 13),
        ("0 9 * * 1", lambda d: d.weekday() == 0),
    ],
    ids=["or", "star-step-dom", "star-step-dow", "full-range-or", "dom-only", "dow-only"],
)
def test_cron_strings_follow_crontab5(expr: str, keep: Callable[[date], bool]) -> None:
    assert _fired_days(expr) == _days_of(2026, keep)


def test_the_rule_is_part_of_the_spec() -> None:
    assert parse_schedule("30 6 13 * 5").spec.days is DayRule.EITHER
    assert parse_schedule("0 9 */10 * 1").spec.days is DayRule.BOTH
    assert parse_schedule("0 3 * * *").spec.days is DayRule.BOTH
    assert parse_schedule("0 30 6 13 * 5").spec.days is DayRule.EITHER  # a seconds field first


# -- stored definitions keep their meaning -----------------------------------------------------
def _stored(fields: str) -> dict[str, object]:
    """A cron spec as every earlier release stored it: no day rule written."""
    return {"kind": "cron", "fields": fields.split(), "tz": "UTC"}


@pytest.mark.parametrize("fields", ["0 3 * * *", "0 9 * * 1-5", "0 0 1 * *", "30 6 13 * 5"])
def test_a_stored_spec_whose_meaning_stays_loads_and_hashes_unchanged(fields: str) -> None:
    stored = _stored(fields)
    loaded = spec_from_json(stored)
    assert spec_to_json(loaded) == stored  # the same JSON: the same definition hash
    assert loaded == parse_schedule(fields).spec  # config sync sees "unchanged"


@pytest.mark.parametrize(
    ("fields", "before"),
    [("0 9 */10 * 1", DayRule.EITHER), ("0 9 13 * */2", DayRule.EITHER)],
)
def test_a_stored_spec_read_the_old_way_keeps_it_until_config_says_otherwise(
    fields: str, before: DayRule
) -> None:
    """Rows written before the rule existed were read as croniter reads them; they still are."""
    loaded = spec_from_json(_stored(fields))
    assert loaded.days is before
    from_config = parse_schedule(fields).spec
    assert from_config != loaded  # sync re-plans the config schedule: version + 1
    old = Definition("job", "t", loaded)
    new = Definition("job", "t", from_config)
    assert old.definition_hash() != new.definition_hash()
    assert spec_from_json(json.loads(json.dumps(spec_to_json(from_config)))) == from_config


def test_a_crontab_whose_days_are_ambiguous_changes_its_stored_definition() -> None:
    """The Friday-13th crontab was stored with croniter's OR; its config now says BOTH."""
    app = Celery("days", set_as_current=False)
    app.conf.beat_schedule = {
        "f13": {"task": "t", "schedule": crontab(minute=30, hour=6, day_of_month=13, day_of_week=5)}
    }
    with FrozenBeat(app, start="2026-01-01T00:00:00Z") as beat:
        row = beat.store.get("f13")
    assert row is not None
    assert row.definition.spec.days is DayRule.BOTH
    assert spec_to_json(row.definition.spec)["days"] == "both"
    assert spec_from_json(_stored("30 6 13 * 5")).days is DayRule.EITHER


# -- in words -----------------------------------------------------------------------------------
def test_the_description_says_how_the_days_combine() -> None:
    both = CronSpec(("30", "6", "13", "*", "5"), "UTC", DayRule.BOTH)
    either = CronSpec(("30", "6", "13", "*", "5"), "UTC", DayRule.EITHER)
    assert describe(both) == "at 06:30 on day 13 of the month if it is a Friday (UTC)"
    assert describe(either) == "at 06:30 on day 13 of the month or on Friday (UTC)"
