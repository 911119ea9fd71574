"""``exclude``: the dates a schedule has no occurrences on, read and bounded (SPEC §15).

Each item is a date (``"2026-12-25"`` or a ``datetime.date``) or a range ``{"from": ..., "to":
...}`` of dates, both ends included. Dates are read on the wall clock of the schedule's zone: a
cron's (a solar event's, a rule's, a custom class's) own zone, an interval's the app's zone as
Celery reads it (``timezone``, on a Django project its ``TIME_ZONE``;
``celery_config.zone_in_force``). An ``@at`` schedule takes none (its one instant is already
chosen). Problems are returned as ``(field, problem)`` pairs for the validator's collector, each
naming the item and how to fix it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from celery_durable_beat.schedules.bounds import YEAR_MAX, YEAR_MIN, show_number
from celery_durable_beat.schedules.spec import (
    EXCLUDE_MAX,
    AtSpec,
    Exclusions,
    IntervalSpec,
    ScheduleSpec,
)

Problems = list[tuple[str, str]]
_FIELD = "exclude"
_FORMS = 'give "YYYY-MM-DD" or {"from": "YYYY-MM-DD", "to": "YYYY-MM-DD"}'


def check_exclude(
    value: object,
    spec: ScheduleSpec | None,
    default_tz: str,
    problems: Problems,
) -> Exclusions | None:
    """The exclusions of an entry, or None when it has none (or they are invalid)."""
    if value is None:
        return None
    if isinstance(spec, AtSpec):
        problems.append(
            (_FIELD, "an @at schedule fires once at its instant and takes no exclude; remove it")
        )
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        problems.append((_FIELD, f"exclude is a {type(value).__name__}; give a list: {_FORMS}"))
        return None
    if len(value) > EXCLUDE_MAX:
        problems.append(
            (
                _FIELD,
                f"exclude holds {len(value)} dates or ranges, more than {EXCLUDE_MAX}; merge "
                'consecutive dates into {"from": ..., "to": ...} ranges or drop past ones',
            )
        )
        return None
    spans = [_span(index, item, problems) for index, item in enumerate(value)]
    if spec is None or any(span is None for span in spans):
        return None
    tz = default_tz if isinstance(spec, IntervalSpec) else spec.tz
    return Exclusions(tz, tuple(span for span in spans if span is not None))


def _span(index: int, item: object, problems: Problems) -> tuple[date, date] | None:
    where = f"exclude[{index}]"
    if isinstance(item, Mapping):
        return _range(where, item, problems)
    day = _date(where, item, problems)
    return None if day is None else (day, day)


def _range(where: str, item: Mapping[Any, Any], problems: Problems) -> tuple[date, date] | None:
    if set(item) != {"from", "to"}:
        keys = ", ".join(sorted(str(key) for key in item)) or "none"
        problems.append(
            (_FIELD, f'{where} has the keys {keys}; a range has exactly "from" and "to"')
        )
        return None
    first = _date(f"{where}.from", item["from"], problems)
    last = _date(f"{where}.to", item["to"], problems)
    if first is None or last is None:
        return None
    if last < first:
        problems.append(
            (
                _FIELD,
                f"{where} ends ({last.isoformat()}) before it starts ({first.isoformat()}); "
                "swap from and to",
            )
        )
        return None
    return first, last


def _date(where: str, value: object, problems: Problems) -> date | None:
    """A calendar date: ``YYYY-MM-DD`` text or a ``date`` (a ``datetime`` is an instant, not
    a date: refused rather than silently cut)."""
    if isinstance(value, datetime):
        problems.append((_FIELD, f"{where} is a datetime; give the date only, {_FORMS}"))
        return None
    day = value if isinstance(value, date) else _parsed(value)
    if day is None:
        problems.append((_FIELD, f"{where} {show_number(value)} is not a date; {_FORMS}"))
        return None
    if not YEAR_MIN <= day.year <= YEAR_MAX:
        problems.append(
            (_FIELD, f"{where} {day.isoformat()} is outside years {YEAR_MIN}-{YEAR_MAX}")
        )
        return None
    return day


def _parsed(value: object) -> date | None:
    if not isinstance(value, str) or len(value) != 10:  # YYYY-MM-DD only, no week dates
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None
