"""A schedule spec in words: ``at 03:00 every day (Europe/Berlin)``, ``every 30 seconds``.

Pure and best effort. The common shapes (fixed times, steps, ranges, lists of weekdays, days and
months) read as English; a field in a form this module does not know (``L``, ``W``, ``#``) makes
the whole description fall back to ``cron "<expr>" (<zone>)``, because a half-right sentence
about when something runs is worse than the expression itself. The zone is always named for a
cron spec, since the same expression means different instants in different zones; an interval is
aligned to the Unix epoch and has no zone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from celery_durable_beat.schedules.dst import zone
from celery_durable_beat.schedules.spec import (
    AtSpec,
    CronSpec,
    DayRule,
    Exclusions,
    IntervalSpec,
    ScheduleSpec,
)

WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DAY_NAMES = {name[:3].lower(): i for i, name in enumerate(WEEKDAYS)}
_MONTH_NAMES = {name[:3].lower(): i + 1 for i, name in enumerate(MONTHS)}
_UNITS = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1000, "second"))
_MAX_LISTED_TIMES = 6
"""Most ``HH:MM`` instants listed one by one; more read better as a step or a range."""

_PART = re.compile(r"(\*|\w+(?:-\w+)?)(?:/(\d+))?")


class _UnknownFieldError(ValueError):
    """A cron field this module cannot put into words."""


@dataclass(frozen=True)
class _Field:
    """One cron field: ``any`` (``*``), a step over a range, or an explicit list of values."""

    values: tuple[int, ...]
    any: bool = False
    step: int | None = None
    start: int | None = None
    end: int | None = None

    @property
    def single(self) -> int | None:
        return self.values[0] if len(self.values) == 1 and not self.any else None


def describe(spec: ScheduleSpec) -> str:
    """The spec in words."""
    if isinstance(spec, IntervalSpec):
        return describe_interval(spec.every_ms)
    if isinstance(spec, AtSpec):
        return _describe_at(spec)
    try:
        return f"{_describe_cron(spec)} ({spec.tz})"
    except _UnknownFieldError:
        return f'cron "{spec.expr}" ({spec.tz})'


def _describe_at(spec: AtSpec) -> str:
    """``once, at 2026-12-24T18:00:00+01:00 (Europe/Berlin)``; a stored instant that no
    calendar of that zone can show (past year 9999, a zone that is not one) in milliseconds."""
    try:
        shown = spec.text().removeprefix("@at ")
    except (ValueError, OverflowError, LookupError, OSError):
        shown = f"{spec.at_ms} ms since 1970"
    return f"once, at {shown} ({spec.tz})"


EXCLUDE_SHOWN = 5
"""How many excluded dates or ranges the words name before saying how many more."""


def describe_exclude(exclusions: Exclusions | None) -> str:
    """``, except on 2026-12-25, 2027-01-01 to 2027-01-03 (Europe/Berlin)``, or ``""``."""
    if exclusions is None:
        return ""
    named = [
        first.isoformat() if first == last else f"{first.isoformat()} to {last.isoformat()}"
        for first, last in exclusions.spans[:EXCLUDE_SHOWN]
    ]
    more = len(exclusions.spans) - EXCLUDE_SHOWN
    if more > 0:
        named.append(f"{more} more")
    return f", except on {', '.join(named)} ({exclusions.tz})"


def describe_bounds(
    start_ms: int | None, end_ms: int | None, expires: float | str | None, tz: str
) -> str:
    """`` from 2026-12-01 until 2027-01-01, expires at the next tick``: what ``start_at``,
    ``end_at`` and ``expires`` add to a schedule in words ("" when none is set)."""
    words = ""
    if start_ms is not None:
        words += f" from {_instant_words(start_ms, tz)}"
    if end_ms is not None:
        words += f" until {_instant_words(end_ms, tz)}"
    if isinstance(expires, str):
        words += ", expires at the next tick"
    elif expires is not None:
        every = describe_interval(round(expires * 1000))
        words += f", expires {every.removeprefix('every ')} after dispatch"
    return words


def _instant_words(ms: int, tz: str) -> str:
    """The instant in the schedule's zone: the date alone at midnight, else date and time."""
    local = datetime.fromtimestamp(ms / 1000, zone(tz))
    if (local.hour, local.minute, local.second, local.microsecond) == (0, 0, 0, 0):
        return local.date().isoformat()
    return local.strftime("%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M")


def describe_interval(every_ms: int) -> str:
    """``every 30 seconds``, ``every hour``, ``every 1500 milliseconds``."""
    for size, unit in _UNITS:
        if every_ms % size == 0:
            return _every(every_ms // size, unit)
    if every_ms > 1000:
        return f"every {every_ms / 1000:g} seconds"
    return _every(every_ms, "millisecond")


def _every(count: int, unit: str) -> str:
    return f"every {unit}" if count == 1 else f"every {count} {unit}s"


# -- parsing fields ---------------------------------------------------------------------------
def _number(text: str, names: dict[str, int]) -> int:
    lowered = text.lower()
    if lowered in names:
        return names[lowered]
    if not text.isdigit():
        raise _UnknownFieldError(text)
    return int(text)


def _parse(text: str, low: int, high: int, names: dict[str, int] | None = None) -> _Field:
    """Parse one field into the values it matches (``*`` kept as ``any``)."""
    names = names or {}
    if text in ("*", "?"):
        return _Field(tuple(range(low, high + 1)), any=True)
    values: set[int] = set()
    parts = text.split(",")
    for part in parts:
        match = _PART.fullmatch(part)
        if not match:
            raise _UnknownFieldError(part)
        body, step_text = match.groups()
        step = int(step_text) if step_text else 1
        if body == "*":
            first, last = low, high
        elif "-" in body:
            first, last = (_number(x, names) for x in body.split("-"))
        else:
            first = _number(body, names)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
        if len(parts) == 1 and (step_text or "-" in body):
            ranged = body != "*" or step == 1
            return _Field(
                tuple(sorted(values)),
                step=step if step_text else None,
                start=first if ranged else None,
                end=last if ranged else None,
            )
    return _Field(tuple(sorted(values)))


def _weekdays(text: str) -> _Field:
    field = _parse(text, 0, 7, _DAY_NAMES)
    values = tuple(sorted({v % 7 for v in field.values}))
    if field.any:
        return _Field(values, any=True)
    return _Field(values, step=field.step, start=field.start, end=field.end)


# -- words ------------------------------------------------------------------------------------
def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def _runs(values: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive runs of sorted values: (1, 2, 3, 5) -> [(1, 3), (5, 5)]."""
    runs: list[tuple[int, int]] = []
    for value in values:
        if runs and value == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], value)
        else:
            runs.append((value, value))
    return runs


def _named(values: Sequence[int], names: Sequence[str], offset: int = 0) -> str:
    """``Monday to Friday``, ``Monday, Wednesday and Friday``."""
    parts = []
    for first, last in _runs(values):
        if last - first >= 2:
            parts.append(f"{names[first - offset]} to {names[last - offset]}")
        else:
            parts.extend(names[v - offset] for v in range(first, last + 1))
    return _join(parts)


def _numbers(values: Sequence[int]) -> str:
    parts = []
    for first, last in _runs(values):
        if last - first >= 2:
            parts.append(f"{first}-{last}")
        else:
            parts.extend(str(v) for v in range(first, last + 1))
    return _join(parts)


def _describe_cron(spec: CronSpec) -> str:
    second = _parse(spec.fields[0], 0, 59) if spec.has_seconds else _Field((0,))
    minute, hour, dom, month, dow = spec.fields[-5:]
    fixed = _fixed_times(second, _parse(minute, 0, 59), _parse(hour, 0, 23))
    time = fixed or _time_words(second, _parse(minute, 0, 59), _parse(hour, 0, 23))
    days = _day_words(
        _parse(dom, 1, 31),
        _parse(month, 1, 12, _MONTH_NAMES),
        _weekdays(dow),
        both=spec.day_rule is DayRule.BOTH,
    )
    if not days and fixed:
        days = "every day"
    return " ".join(part for part in (time, days) if part)


def _fixed_times(second: _Field, minute: _Field, hour: _Field) -> str | None:
    """``at 03:00`` or ``at 09:00 and 17:30`` when the field combinations are few."""
    if any(f.any or f.step for f in (second, minute, hour)):
        return None
    if len(second.values) * len(minute.values) * len(hour.values) > _MAX_LISTED_TIMES:
        return None
    with_seconds = second.values != (0,)
    times = [
        f"{h:02d}:{m:02d}:{s:02d}" if with_seconds else f"{h:02d}:{m:02d}"
        for h in hour.values
        for m in minute.values
        for s in second.values
    ]
    return f"at {_join(times)}"


def _time_words(second: _Field, minute: _Field, hour: _Field) -> str:
    """Times that are not a short list: a rhythm within the hour, then which hours."""
    if second.values == (0,) and minute.start is None and not (minute.any or minute.step):
        marks = _join([f":{m:02d}" for m in minute.values])
        if hour.any:
            return f"every hour at {marks}"
        if hour.step and hour.start is None:
            return f"every {hour.step} hours at {marks}"
        return f"every hour at {marks} {_hour_words(hour, minute)}"
    within = _within_hour(second, minute)
    return within if hour.any else f"{within} {_hour_words(hour, minute)}"


def _within_hour(second: _Field, minute: _Field) -> str:
    """``every minute``, ``every 15 minutes``, ``every 10 seconds``."""
    if second.values != (0,):
        seconds = _step_words(second, "second")
        if second.single is not None or not (second.any or second.step):
            seconds = f"every minute {seconds}"
        return seconds if minute.any else f"{seconds} during minute {_numbers(minute.values)}"
    if minute.start is not None:
        first, last = minute.values[0], minute.values[-1]
        rhythm = _every(minute.step or 1, "minute")
        return f"{rhythm} from :{first:02d} to :{last:02d} past the hour"
    return _step_words(minute, "minute")


def _step_words(field: _Field, unit: str) -> str:
    if field.any:
        return f"every {unit}"
    if field.step and field.start is None:
        return _every(field.step, unit)
    return f"at {unit} {_numbers(field.values)}"


def _hour_words(hour: _Field, minute: _Field) -> str:
    """``from 09:00 to 17:45`` for a range of hours, else the hours listed."""
    if hour.start is not None and hour.end is not None and not hour.step:
        first, last = minute.values[0], minute.values[-1]
        return f"from {hour.start:02d}:{first:02d} to {hour.end:02d}:{last:02d}"
    label = "hour" if len(hour.values) == 1 else "hours"
    return f"during {label} {_numbers(hour.values)}"


def _weekday_words(dow: _Field, condition: bool) -> str:
    """``on Friday``; as a condition on days of the month, ``if it is a Friday``."""
    named = _named(dow.values, WEEKDAYS)
    if not condition:
        return f"on {named}"
    return f"if it is a {named}" if len(dow.values) == 1 else f"if it falls on {named}"


def _day_words(dom: _Field, month: _Field, dow: _Field, both: bool) -> str:
    """The days part; day of month and weekday combine as the spec's day rule says."""
    if dow.any and len(dom.values) == 1 and len(month.values) == 1:
        return f"on {MONTHS[month.values[0] - 1]} {dom.values[0]}"
    months = "" if month.any else f"in {_named(month.values, MONTHS, offset=1)}"
    choices = []
    if not dom.any:
        label = "day" if len(dom.values) == 1 else "days"
        choices.append(f"on {label} {_numbers(dom.values)} of the month")
    if not dow.any:
        choices.append(_weekday_words(dow, condition=both and bool(choices)))
    if not choices:
        return months
    joined = " ".join(choices) if both else " or ".join(choices)
    return " ".join(part for part in (joined, months) if part)
