"""A schedule spec in words: ``at 03:00 every day (Europe/Berlin)``, ``every 30 seconds``.

Pure and best effort. The common shapes (fixed times, steps, ranges, lists of weekdays, days and
months) read as English, and so do the cron extensions of SPEC §18: ``L`` in the day-of-month
field alone or in a list of days (``on the last day of the month``), and a day-of-week field made
only of ``<weekday>#<n>`` and ``L<weekday>`` items (``on the first and third Friday of the
month``). A field in a form this module does not know (``W``, ``15-L``, ``mon-fri#2``, plain
weekdays mixed with ``#``) makes the whole description fall back to ``cron "<expr>" (<zone>)``,
because a half-right sentence about when something runs is worse than the expression itself. For
the same reason a restricted day of month with ``#``/``L<weekday>`` under the "either" day rule
falls back: croniter cannot search that union (validation refuses it), so words saying "or"
would describe ticks that an older stored definition does not get. The zone is always named for a
cron spec, since the same expression means different instants in different zones; an interval is
aligned to the Unix epoch and has no zone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from celery_durable_beat.schedules.custom import CustomSpec
from celery_durable_beat.schedules.dst import zone
from celery_durable_beat.schedules.rrule import RRuleSpec, describe_rrule
from celery_durable_beat.schedules.solar import SolarSpec, describe_solar
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
_NTH = re.compile(r"(\w+)#(\d)|L(\w+)", re.ASCII | re.IGNORECASE)
"""One day-of-week item of SPEC §18: ``5#2``, ``fri#2`` (the n-th) or ``L5`` (the last)."""
ORDINALS = ("first", "second", "third", "fourth", "fifth")
_LAST = 9
"""The ``n`` of ``L<weekday>`` in :attr:`_Field.nth`: sorts after the fifth, is none of them."""


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
    last: bool = False
    """Day of month: ``L`` is among the values (the month's last day, whichever it is)."""
    nth: tuple[tuple[int, int], ...] = ()
    """Day of week: ``(weekday, n)`` pairs, ``n`` 1-5 or :data:`_LAST`, sorted."""

    @property
    def single(self) -> int | None:
        return self.values[0] if len(self.values) == 1 and not self.any else None


def describe(spec: ScheduleSpec) -> str:
    """The spec in words."""
    if isinstance(spec, IntervalSpec):
        return describe_interval(spec.every_ms)
    if isinstance(spec, AtSpec):
        return _describe_at(spec)
    if not isinstance(spec, CronSpec):
        return describe_kind(spec)
    try:
        return f"{_describe_cron(spec)} ({spec.tz})"
    except _UnknownFieldError:
        return f'cron "{spec.expr}" ({spec.tz})'


def describe_kind(spec: SolarSpec | RRuleSpec | CustomSpec) -> str:
    """The kinds of SPEC §18: each module words its own; a custom class is named by what
    identifies it (its ``repr()`` and class), since only its code knows its times."""
    if isinstance(spec, SolarSpec):
        return describe_solar(spec)
    if isinstance(spec, RRuleSpec):
        return describe_rrule(spec)
    return f"by {spec.shown}, a custom schedule ({spec.path})"


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


def _month_days(text: str) -> _Field:
    """The day-of-month field; ``L`` items set ``last`` and the rest are plain days."""
    parts = text.split(",")
    plain = [part for part in parts if part.upper() != "L"]
    if len(plain) == len(parts):
        return _parse(text, 1, 31)
    days = _parse(",".join(plain), 1, 31) if plain else _Field(())
    if days.any:  # "*,L" is every day; no sentence worth the risk
        raise _UnknownFieldError(text)
    return _Field(days.values, last=True)


def _weekdays(text: str) -> _Field:
    if any("#" in part or part[:1].lower() == "l" for part in text.split(",")):
        return _nth_weekdays(text)
    field = _parse(text, 0, 7, _DAY_NAMES)
    values = tuple(sorted({v % 7 for v in field.values}))
    if field.any:
        return _Field(values, any=True)
    return _Field(values, step=field.step, start=field.start, end=field.end)


def _nth_weekdays(text: str) -> _Field:
    """A day-of-week field of ``<weekday>#<n>`` and ``L<weekday>`` items only."""
    nth: set[tuple[int, int]] = set()
    for part in text.split(","):
        match = _NTH.fullmatch(part)
        if not match:  # a plain weekday or a range among them: croniter's own reading
            raise _UnknownFieldError(part)
        day, n, last_day = match.groups()
        weekday = _number(last_day if n is None else day, _DAY_NAMES)
        count = _LAST if n is None else int(n)
        if weekday > 7 or not (count == _LAST or 1 <= count <= len(ORDINALS)):
            raise _UnknownFieldError(part)
        nth.add((weekday % 7, count))
    ordered = tuple(sorted(nth))
    return _Field(tuple(sorted({day for day, _ in ordered})), nth=ordered)


# -- words ------------------------------------------------------------------------------------
def _join(items: Sequence[str], conjunction: str = "and") -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {conjunction} {items[-1]}"


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
    return _join(_number_parts(values))


def _number_parts(values: Sequence[int]) -> list[str]:
    """``["1-7", "15"]``: runs of three or more as a range, the rest one by one."""
    parts = []
    for first, last in _runs(values):
        if last - first >= 2:
            parts.append(f"{first}-{last}")
        else:
            parts.extend(str(v) for v in range(first, last + 1))
    return parts


def _describe_cron(spec: CronSpec) -> str:
    second = _parse(spec.fields[0], 0, 59) if spec.has_seconds else _Field((0,))
    minute, hour, dom, month, dow = spec.fields[-5:]
    fixed = _fixed_times(second, _parse(minute, 0, 59), _parse(hour, 0, 23))
    time = fixed or _time_words(second, _parse(minute, 0, 59), _parse(hour, 0, 23))
    days = _day_words(
        _month_days(dom),
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


def _month_day_words(dom: _Field, of: str) -> str:
    """``on days 1 and 15 of the month``, ``on day 1 and the last day of the month``."""
    label = "day" if len(dom.values) == 1 else "days"
    if not dom.last:
        return f"on {label} {_numbers(dom.values)} of {of}"
    if not dom.values:
        return f"on the last day of {of}"
    return f"on {label} {_join([*_number_parts(dom.values), 'the last day'])} of {of}"


def _nth_words(dow: _Field, condition: bool, of: str) -> str:
    """``on the first and third Friday of the month``; as a condition on days of the month,
    ``if it is the second Friday``."""
    by_day: dict[int, list[str]] = {}
    for day, n in dow.nth:
        by_day.setdefault(day, []).append("last" if n == _LAST else ORDINALS[n - 1])
    word = "or" if condition else "and"
    named = [f"the {_join(counts, word)} {WEEKDAYS[day]}" for day, counts in by_day.items()]
    if condition:
        return f"if it is {_join(named, 'or')}"
    return f"on {_join(named)} of {of}"


def _weekday_words(dow: _Field, condition: bool, of: str = "the month") -> str:
    """``on Friday``; as a condition on days of the month, ``if it is a Friday``."""
    if dow.nth:
        return _nth_words(dow, condition, of)
    named = _named(dow.values, WEEKDAYS)
    if not condition:
        return f"on {named}"
    return f"if it is a {named}" if len(dow.values) == 1 else f"if it falls on {named}"


def _day_words(dom: _Field, month: _Field, dow: _Field, both: bool) -> str:
    """The days part; day of month and weekday combine as the spec's day rule says."""
    if dow.any and len(dom.values) == 1 and len(month.values) == 1 and not dom.last:
        return f"on {MONTHS[month.values[0] - 1]} {dom.values[0]}"
    if dow.nth and not (both or dom.any):
        raise _UnknownFieldError("a union croniter cannot search")  # see the module docstring
    months = "" if month.any else f"in {_named(month.values, MONTHS, offset=1)}"
    of = "the month"
    if len(month.values) == 1 and (dom.last or dow.nth) and (dom.any or dow.any):
        of, months = MONTHS[month.values[0] - 1], ""  # "the last day of February"
    choices = []
    if not dom.any:
        choices.append(_month_day_words(dom, of))
    if not dow.any:
        choices.append(_weekday_words(dow, condition=both and bool(choices), of=of))
    if not choices:
        return months
    joined = " ".join(choices) if both else " or ".join(choices)
    return " ".join(part for part in (joined, months) if part)
