"""The words of a recurrence rule: its RRULE parts read, and a whole rule put into English.

:mod:`~celery_durable_beat.schedules.rrule` does the dates and the search; this module holds the
vocabulary both directions need (frequencies, weekday codes, the ranges of the numbered parts)
and imports nothing of it, so there is no cycle.

**Reading.** dateutil accepts things RFC 5545 does not mean, silently: ``BYMONTHDAY=0`` reads
as "every day", ``BYHOUR=24`` fails only when a search builds the time, a numbered ``BYDAY``
outside ``MONTHLY``/``YEARLY`` loses its number (``FREQ=WEEKLY;BYDAY=1MO`` is every Monday),
``MO(+1)`` is its own syntax. So every part is checked here first, against RFC 5545's ranges,
and a refusal names the part and the fix; only then does dateutil read it.

**Describing.** Best effort and honest, as for cron (:mod:`.describe`): the common shapes read
as English (``monthly on the last Friday at 09:00 (Europe/Berlin)``); ``BYWEEKNO``,
``BYYEARDAY``, ``BYSETPOS`` and other shapes this module cannot say fall back to the rule itself,
``rule "RRULE:..." (zone)``, because a half-right sentence about when something runs is worse
than the rule. Times come from the rule's explicit parts, so a time dateutil takes from DTSTART
is said too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from dateutil.rrule import DAILY, HOURLY, MINUTELY, MONTHLY, SECONDLY, WEEKLY, YEARLY

from celery_durable_beat.schedules.errors import SpecError

FREQS = {
    "YEARLY": YEARLY,
    "MONTHLY": MONTHLY,
    "WEEKLY": WEEKLY,
    "DAILY": DAILY,
    "HOURLY": HOURLY,
    "MINUTELY": MINUTELY,
    "SECONDLY": SECONDLY,
}
"""RFC 5545's frequencies, as dateutil numbers them; none is finer than a second."""
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
"""Weekday codes in dateutil's order (Monday is 0)."""
COUNT_MAX = 100_000
"""The largest COUNT: it is expanded once, when the rule is read."""
UNITS = ("year", "month", "week", "day", "hour", "minute", "second")
"""The period of each frequency, by dateutil's number."""

_NUMBERED = {
    "BYSECOND": (0, 59, False),
    "BYMINUTE": (0, 59, False),
    "BYHOUR": (0, 23, False),
    "BYMONTHDAY": (1, 31, True),
    "BYYEARDAY": (1, 366, True),
    "BYWEEKNO": (1, 53, True),
    "BYMONTH": (1, 12, False),
    "BYSETPOS": (1, 366, True),
}
"""Each numbered part's range; ``True``: also negative, counted from the end (never 0)."""
_PARTS = ("FREQ", "UNTIL", "COUNT", "INTERVAL", *_NUMBERED, "BYDAY", "WKST")
_INTERVAL_MAX = (100, 1200, 5217, 36_525, 876_600, 52_596_000, 3_155_760_000)
"""The INTERVAL of each frequency that makes periods of 100 years (SPEC §2's longest)."""
_NUMBER = re.compile(r"[+-]?\d{1,4}")
_BYDAY = re.compile(r"([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)")

Refuse = Callable[[str], SpecError]
"""Builds the refusal of a problem, naming the rule (``has FREQ=..., ...``)."""


@dataclass(frozen=True)
class RuleParts:
    """One RRULE line's parts, checked; ``by`` holds the BY* parts and WKST as written."""

    freq: int
    interval: int
    count: int | None
    until: str | None
    by: Mapping[str, str]

    @property
    def freq_name(self) -> str:
        return next(name for name, number in FREQS.items() if number == self.freq)

    @property
    def unit(self) -> str:
        return UNITS[self.freq]


def read_parts(value: str, refuse: Refuse) -> RuleParts:
    """An RRULE value (``FREQ=...;BY...``) checked part by part against RFC 5545."""
    pairs = _pairs(value, refuse)
    name = pairs.pop("FREQ", "")
    if name not in FREQS:
        raise refuse(
            (f"has FREQ={name}, not an RFC 5545 frequency" if name else "has no FREQ")
            + "; use YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY or SECONDLY (there is "
            "no frequency finer than a second)"
        )
    freq = FREQS[name]
    interval = _whole("INTERVAL", pairs.pop("INTERVAL", "1"), _INTERVAL_MAX[freq], refuse)
    count_text, until = pairs.pop("COUNT", None), pairs.pop("UNTIL", None)
    if count_text is not None and until is not None:
        raise refuse("has both COUNT and UNTIL, which RFC 5545 forbids; keep one")
    count = None if count_text is None else _whole("COUNT", count_text, COUNT_MAX, refuse)
    for part, text in pairs.items():
        if part == "WKST" and text not in WEEKDAYS:
            raise refuse(f"has WKST={text}; use one of {', '.join(WEEKDAYS)}")
        if part == "BYDAY":
            _check_days(text, freq, "BYMONTH" in pairs, refuse)
        elif part in _NUMBERED:
            _check_numbers(part, text, refuse)
    return RuleParts(freq, interval, count, until, pairs)


def _pairs(value: str, refuse: Refuse) -> dict[str, str]:
    """``NAME=value`` parts, upper-cased, each a part RFC 5545 knows and given once."""
    pairs: dict[str, str] = {}
    for item in value.split(";"):
        name, equals, text = (piece.strip().upper() for piece in item.partition("="))
        if not equals or not name or not text:
            raise refuse(f'has the rule part "{item}"; write NAME=value parts separated by ";"')
        if name not in _PARTS:
            known = ", ".join(_PARTS)
            raise refuse(f"has the rule part {name}, which RFC 5545 does not know; use {known}")
        if name in pairs:
            raise refuse(f"gives {name} twice; keep one")
        pairs[name] = text
    return pairs


def _whole(name: str, text: str, most: int, refuse: Refuse) -> int:
    if not text.isdigit() or not 1 <= int(text) <= most:
        raise refuse(f"has {name}={text}; give a whole number from 1 to {most}")
    return int(text)


def _check_numbers(part: str, text: str, refuse: Refuse) -> None:
    low, high, signed = _NUMBERED[part]
    for item in text.split(","):
        number = int(item) if _NUMBER.fullmatch(item) else None
        if number is None or not (low <= abs(number) <= high and (signed or number >= 0)):
            negative = f" or -{high} to -{low} (from the end)" if signed else ""
            whole = " (ticks are whole seconds)" if part == "BYSECOND" else ""
            raise refuse(
                f'has {part}={text}: "{item}" is not a whole number from {low} to {high}'
                f"{negative}{whole}"
            )


def _check_days(text: str, freq: int, months: bool, refuse: Refuse) -> None:
    """Weekdays, numbered only where RFC 5545 numbers them: within the month (MONTHLY, or
    YEARLY with BYMONTH, where dateutil fails past the 5th) or within the year (YEARLY)."""
    for item in text.split(","):
        match = _BYDAY.fullmatch(item)
        if match is None:
            raise refuse(f'has BYDAY={text}: "{item}" is not a weekday such as MO, 1MO or -1FR')
        if match.group(1) is None:
            continue
        most = {MONTHLY: 5, YEARLY: 5 if months else 53}.get(freq)
        if most is None:
            raise refuse(
                f"has BYDAY={text}: a numbered weekday ({item}) needs FREQ=MONTHLY or YEARLY "
                "(dateutil would drop the number); remove the number or change FREQ"
            )
        if not 1 <= abs(int(match.group(1))) <= most:
            within = "month" if most == 5 else "year"
            raise refuse(
                f"has BYDAY={text}: {item} counts within the {within}, so its number must be "
                f"1 to {most} or -{most} to -1"
            )


def derived_parts(parts: RuleParts, start: datetime) -> dict[str, str]:
    """The parts dateutil would take from DTSTART, made explicit (with WKST, whose default is
    otherwise the process-wide ``calendar.firstweekday()``), so a rule restarted at another
    DTSTART means the same; no UNTIL or COUNT."""
    by = {name: text for name, text in parts.by.items() if name != "WKST"}
    if not {"BYWEEKNO", "BYYEARDAY", "BYMONTHDAY", "BYDAY"} & set(by):
        if parts.freq == YEARLY:
            by.setdefault("BYMONTH", str(start.month))
        if parts.freq in (YEARLY, MONTHLY):
            by["BYMONTHDAY"] = str(start.day)
        elif parts.freq == WEEKLY:
            by["BYDAY"] = WEEKDAYS[start.weekday()]
    for name, finer, value in (
        ("BYHOUR", HOURLY, start.hour),
        ("BYMINUTE", MINUTELY, start.minute),
        ("BYSECOND", SECONDLY, start.second),
    ):
        if parts.freq < finer:
            by.setdefault(name, str(value))
    head = {"FREQ": parts.freq_name, "INTERVAL": str(parts.interval)}
    return {**head, "WKST": parts.by.get("WKST", "MO"), **by}


@dataclass(frozen=True)
class RuleFacts:
    """What a description says of one RRULE line; ``parts`` as :func:`derived_parts` gives."""

    freq: int
    interval: int
    parts: Mapping[str, str]
    count: int | None
    until: datetime | None
    """UNTIL as a wall time of the zone (None with COUNT)."""


@dataclass(frozen=True)
class SetFacts:
    """What a description says of a whole rule."""

    rule: str
    tz: str
    rules: tuple[RuleFacts, ...]
    start: datetime | None
    """DTSTART's wall time, when the rule gives one."""
    rdates: tuple[datetime, ...]
    exdates: frozenset[datetime]


class _UnsaidError(ValueError):
    """A shape this module cannot put into words."""


_WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_NAMES = (
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
_GROUPS = {frozenset(WEEKDAYS[:5]): "weekdays", frozenset(WEEKDAYS[5:]): "weekends"}
"""Weekday lists said as a group ("daily on weekdays"), never with "every"."""
_ORDINALS = ("first", "second", "third", "fourth", "fifth")
_ONCE_A = ("yearly", "monthly", "weekly", "daily", "hourly", "every minute", "every second")
_MAX_TIMES = 6
_MAX_DATES = 3


def describe(facts: SetFacts) -> str:
    """The rule in words, or ``rule "<rule>" (<zone>)`` for a shape not said here."""
    try:
        said = [_rule_words(rule) for rule in facts.rules]
    except _UnsaidError:
        return f'rule "{" ".join(facts.rule.splitlines())}" ({facts.tz})'
    text = ", and ".join(said)
    if facts.start is not None and facts.rules:
        text += f", starting {_wall_words(facts.start)}"
    if facts.rdates:
        text += (", plus " if said else "on ") + _dates_words(facts.rdates)
    if facts.exdates:
        text += ", except " + _dates_words(sorted(facts.exdates))
    return f"{text} ({facts.tz})"


def _rule_words(rule: RuleFacts) -> str:
    parts = rule.parts
    if {"BYWEEKNO", "BYYEARDAY", "BYSETPOS"} & set(parts):
        raise _UnsaidError
    head = (
        _ONCE_A[rule.freq] if rule.interval == 1 else f"every {rule.interval} {UNITS[rule.freq]}s"
    )
    said = " ".join(w for w in (head, _day_words(rule.freq, parts), _time_words(rule)) if w)
    if rule.count is not None:
        said += ", once" if rule.count == 1 else f", {rule.count} times"
    if rule.until is not None:
        end = rule.until
        shown = end.date().isoformat() if end.time().isoformat() == "23:59:59" else _wall_words(end)
        said += f", until {shown}"
    return said


def _numbers(parts: Mapping[str, str], name: str) -> list[int]:
    return sorted({int(item) for item in parts[name].split(",")}) if name in parts else []


def _day_words(freq: int, parts: Mapping[str, str]) -> str:
    months = [_MONTH_NAMES[m - 1] for m in _numbers(parts, "BYMONTH")]
    month_days = _numbers(parts, "BYMONTHDAY")
    weekdays = parts["BYDAY"].split(",") if "BYDAY" in parts else []
    if month_days and weekdays:
        raise _UnsaidError
    in_months = f" in {_join(months)}" if months else ""
    if month_days:
        return _month_day_words(freq, month_days, months, in_months)
    if not weekdays:
        if freq <= WEEKLY:  # dateutil gives these a day part from DTSTART
            raise _UnsaidError
        return in_months.strip()
    return _weekday_words(freq, weekdays, months, in_months)


def _month_day_words(freq: int, days: list[int], months: list[str], in_months: str) -> str:
    said = _month_days(days)
    if freq == YEARLY:
        if len(months) == 1 and len(days) == 1 and days[0] > 0:
            return f"on {months[0]} {days[0]}"
        return f"on {said} of {_join(months) if months else 'every month'}"
    return f"on {said}{in_months}" if freq == MONTHLY else f"on {said} of the month{in_months}"


def _weekday_words(freq: int, weekdays: list[str], months: list[str], in_months: str) -> str:
    numbered = [bool(match and match.group(1)) for match in map(_BYDAY.fullmatch, weekdays)]
    if all(numbered):
        named = _join([_numbered_day(w) for w in weekdays])
        if freq == MONTHLY:
            return f"on {named}{in_months}"
        return f"on {named} of {_join(months)}" if months else f"on {named} of the year"
    if any(numbered):
        raise _UnsaidError
    names = _GROUPS.get(frozenset(weekdays)) or _join(
        [_WEEKDAY_NAMES[WEEKDAYS.index(w)] for w in sorted(set(weekdays), key=WEEKDAYS.index)]
    )
    every = "every " if freq in (YEARLY, MONTHLY) and names not in _GROUPS.values() else ""
    return f"on {every}{names}{in_months}"


def _numbered_day(item: str) -> str:
    match = _BYDAY.fullmatch(item)
    assert match is not None and match.group(1)
    number = int(match.group(1))
    return f"the {_ordinal(number)} {_WEEKDAY_NAMES[WEEKDAYS.index(match.group(2))]}"


def _ordinal(number: int) -> str:
    """``first``, ``last``, ``second-to-last``, ``20th``, ``20th-to-last``."""
    if number == -1:
        return "last"
    size = abs(number)
    word = _ORDINALS[size - 1] if size <= len(_ORDINALS) else _suffixed(size)
    return word if number > 0 else f"{word}-to-last"


def _suffixed(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10)
    return f"{number}{suffix or 'th'}"


def _month_days(days: Sequence[int]) -> str:
    positive = [d for d in days if d > 0]
    said = [f"day{'s' if len(positive) > 1 else ''} {_join([str(d) for d in positive])}"]
    said = said if positive else []
    return _join(said + [f"the {_ordinal(d)} day" for d in sorted(days) if d < 0])


def _time_words(rule: RuleFacts) -> str:
    parts, freq = rule.parts, rule.freq
    hours, minutes, seconds = (_numbers(parts, n) for n in ("BYHOUR", "BYMINUTE", "BYSECOND"))
    if freq == SECONDLY:
        if hours or minutes or seconds:
            raise _UnsaidError
        return ""
    if freq == MINUTELY:
        if hours or minutes:
            raise _UnsaidError
        return (
            ""
            if seconds == [0]
            else f"at second{'s' if len(seconds) > 1 else ''} " + _join([str(s) for s in seconds])
        )
    if freq == HOURLY:
        if hours or len(minutes) * len(seconds) > _MAX_TIMES:
            raise _UnsaidError
        show_s = any(seconds)
        past = [f":{m:02}" + (f":{s:02}" if show_s else "") for m in minutes for s in seconds]
        return f"at {_join(past)}"
    if len(hours) * len(minutes) * len(seconds) > _MAX_TIMES:
        raise _UnsaidError
    show_s = any(seconds)
    times = [
        f"{h:02}:{m:02}" + (f":{s:02}" if show_s else "")
        for h in hours
        for m in minutes
        for s in seconds
    ]
    return f"at {_join(times)}"


def _wall_words(wall: datetime) -> str:
    shown = wall.strftime("%Y-%m-%d %H:%M")
    return shown + (f":{wall.second:02}" if wall.second else "")


def _dates_words(walls: Sequence[datetime]) -> str:
    if len(walls) > _MAX_DATES:
        return f"{len(walls)} dates from {_wall_words(walls[0])} to {_wall_words(walls[-1])}"
    return _join([_wall_words(w) for w in walls])


def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"
