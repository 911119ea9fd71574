"""Schedule specs: what a ``schedule`` value means, as immutable values.

A cron spec matches fields on the wall clock of its zone; an interval spec fires every
``every_ms`` milliseconds aligned to the Unix epoch in UTC, so tick identities do not depend on
when a beat process started; an at spec (``@at <instant>``, SPEC §15) fires once, at one
instant, and has ended afterwards. The kinds users bring from elsewhere (SPEC §18) have a module
each, whose spec this module unites with these: solar events (:mod:`.solar`), RFC 5545
recurrence rules (:mod:`.rrule`) and custom schedule classes (:mod:`.custom`).

Exclusion dates (``exclude``) are not a kind: they are :class:`Exclusions`, a value of the
definition, which the occurrence engine applies on top of any cron or interval spec
(:class:`ExcludedSpec`), so every caller of the engine agrees on them without a store.

How the day-of-month and day-of-week fields combine is part of a cron spec (:class:`DayRule`),
because the same five fields mean different days to different schedulers (SPEC §5): a Celery
``crontab`` needs both to match; a cron string follows crontab(5), where a day matching either
fires when both fields are restricted (neither starts with ``*``), and both must match otherwise.
The rule is decided once, when the schedule is read, and stored with the spec: a definition
stored before the rule existed is read the way croniter read it then (:func:`legacy_day_rule`),
so no stored schedule changes meaning by an upgrade alone.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from enum import Enum
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter

from celery_durable_beat.schedules.bounds import INTERVAL_MAX_MS, SECONDS_MAX, show_number
from celery_durable_beat.schedules.custom import CustomObject, CustomSpec, custom_spec
from celery_durable_beat.schedules.errors import SpecError
from celery_durable_beat.schedules.rrule import RRuleSpec, is_rrule_text, parse_rrule
from celery_durable_beat.schedules.solar import SolarSpec, parse_solar, solar_spec

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_EVERY_MS = re.compile(r"@every:([0-9]+)")
_EVERY_UNIT = re.compile(r"@every\s+([0-9]+)\s*([smhd])")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_CRON_TZ = re.compile(r"CRON_TZ=(\S+)\s+(.*)", re.DOTALL)
_RANDOM_FIELD = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)
"""croniter's ``R``/``H`` fields: drawn per croniter object, so tick ids would differ by process."""


class DayRule(str, Enum):
    """How a cron spec's day-of-month and day-of-week fields combine."""

    BOTH = "both"
    """A day fires when it matches both fields (Celery's ``crontab``; crontab(5) with a ``*``)."""
    EITHER = "either"
    """A day fires when it matches either field (crontab(5) with both fields restricted)."""


_DOM, _DOW = -3, -1
"""Where the day-of-month and day-of-week fields are, counted from the end (5 or 6 fields)."""
_DAY_FIELD, _DOW_FIELD = 2, 4
"""croniter's indexes of the day fields in its ``expanded`` lists (5 and 6 fields alike)."""


def crontab5_day_rule(fields: tuple[str, ...]) -> DayRule:
    """crontab(5): OR only when neither day field starts with ``*`` (``?`` counts as ``*``)."""
    starred = any(fields[i].startswith(("*", "?")) for i in (_DOM, _DOW))
    return DayRule.BOTH if starred else DayRule.EITHER


@lru_cache(maxsize=4096)
def legacy_day_rule(fields: tuple[str, ...]) -> DayRule:
    """The rule croniter applied before specs carried one: OR unless it expanded a field to all.

    Only for reading definitions stored without a rule; never for reading new config. A field
    written ``*`` (or ``?``) is always "all" to croniter, which answers the common shapes without
    expanding anything: loading thousands of stored rows stays cheap.
    """
    if any(fields[i] in ("*", "?") for i in (_DOM, _DOW)):
        return DayRule.BOTH
    expanded = croniter(
        " ".join(fields), datetime(2000, 1, 1), second_at_beginning=len(fields) == 6
    ).expanded
    whole = any(expanded[i] == ["*"] for i in (_DAY_FIELD, _DOW_FIELD))
    return DayRule.BOTH if whole else DayRule.EITHER


@dataclass(frozen=True)
class CronSpec:
    """A cron expression read on the wall clock of ``tz``.

    ``fields`` are 5 (minute first) or 6 (seconds first) whitespace-separated fields. ``days``
    says how the two day fields combine; left out, it is crontab(5)'s rule for these fields, as
    for a cron string.
    """

    fields: tuple[str, ...]
    tz: str = "UTC"
    days: DayRule | None = None

    def __post_init__(self) -> None:
        if self.days is None:
            object.__setattr__(self, "days", crontab5_day_rule(self.fields))

    @property
    def day_rule(self) -> DayRule:
        """``days``, never None once constructed."""
        return self.days or crontab5_day_rule(self.fields)

    @property
    def has_seconds(self) -> bool:
        return len(self.fields) == 6

    @property
    def expr(self) -> str:
        return " ".join(self.fields)

    @property
    def is_fixed_time(self) -> bool:
        """Classic cron's test: neither the minute nor the hour field starts with ``*``."""
        minute, hour = self.fields[-5], self.fields[-4]
        return not (minute.startswith("*") or hour.startswith("*"))

    def text(self) -> str:
        return self.expr


@dataclass(frozen=True)
class IntervalSpec:
    """Every ``every_ms`` milliseconds, at instants that are multiples of it since the epoch."""

    every_ms: int

    @property
    def tz(self) -> str:
        return "UTC"

    def text(self) -> str:
        for unit in ("d", "h", "m", "s"):
            if self.every_ms % _UNIT_MS[unit] == 0:
                return f"@every {self.every_ms // _UNIT_MS[unit]}{unit}"
        return f"@every:{self.every_ms}"


@dataclass(frozen=True)
class AtSpec:
    """One tick at ``at_ms`` (UTC epoch milliseconds); ``tz`` is the zone it is shown in."""

    at_ms: int
    tz: str = "UTC"

    def text(self) -> str:
        """``@at`` and the instant in its zone with the offset: what ``parse_schedule`` reads
        back to the same spec."""
        return f"@at {_instant_text(self.at_ms, self.tz)}"


RepeatingSpec = CronSpec | IntervalSpec | SolarSpec | RRuleSpec | CustomSpec
"""Every kind with more than one tick: what ``exclude`` applies to."""

ScheduleSpec = RepeatingSpec | AtSpec


def _instant_text(ms: int, tz: str) -> str:
    moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)
    spec = "milliseconds" if ms % 1000 else "seconds"
    return moment.astimezone(ZoneInfo(tz)).isoformat(timespec=spec)


EXCLUDE_MAX = 1000
"""The most dates or ranges one schedule's ``exclude`` holds (SPEC §15)."""


@dataclass(frozen=True)
class Exclusions:
    """Dates on which a schedule has no occurrences, read on the wall clock of ``tz``.

    ``spans`` are the dates as given, each ``(first, last)`` (a single date has both equal), in
    the order given: what is stored and shown. ``merged`` are the same days as sorted, disjoint
    ``(first, last)`` proleptic ordinals, which the engine searches with ``bisect``.
    """

    tz: str
    spans: tuple[tuple[date, date], ...]
    merged: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        merged: list[tuple[int, int]] = []
        for first, last in sorted((a.toordinal(), b.toordinal()) for a, b in self.spans):
            if merged and first <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        object.__setattr__(self, "merged", tuple(merged))
        object.__setattr__(self, "_starts", tuple(first for first, _ in merged))

    def span_of(self, day: int) -> tuple[int, int] | None:
        """The merged span holding the proleptic ordinal ``day``, or None."""
        index = bisect.bisect_right(self._starts, day) - 1
        if index >= 0 and self.merged[index][1] >= day:
            return self.merged[index]
        return None

    def to_json(self) -> list[Any]:
        """The dates as written: ``"2026-12-25"`` or ``{"from": ..., "to": ...}``."""
        return [
            first.isoformat()
            if first == last
            else {"from": first.isoformat(), "to": last.isoformat()}
            for first, last in self.spans
        ]


@dataclass(frozen=True)
class ExcludedSpec:
    """A repeating spec whose occurrences on excluded dates are not occurrences."""

    base: RepeatingSpec
    exclusions: Exclusions


Timeline = ScheduleSpec | ExcludedSpec
"""What the occurrence engine and the planner walk: a spec, with its exclusions if any."""


@dataclass(frozen=True)
class CronFields:
    """Cron fields whose day rule is already decided: a Celery ``crontab``, translated.

    The Celery edge hands this to :func:`parse_schedule` instead of a string, because no cron
    string says "both day fields must match" when both are restricted.
    """

    fields: tuple[str, ...]
    days: DayRule


@dataclass(frozen=True)
class SolarFields:
    """A Celery ``solar``'s event and place, translated; :func:`parse_schedule` checks them and
    gives the spec the entry's zone."""

    event: object
    lat: object
    lon: object


@dataclass(frozen=True)
class ParsedSchedule:
    """A parsed ``schedule`` value; ``cron_tz`` is the zone of a ``CRON_TZ=`` prefix if any."""

    spec: ScheduleSpec
    cron_tz: str | None = None


def parse_schedule(value: object, tz: str = "UTC") -> ParsedSchedule:
    """Parse a ``schedule`` value of the forms in SPEC §2 (Celery objects are translated first).

    ``tz`` is the zone a cron expression is read in unless a ``CRON_TZ=`` prefix names one.
    """
    if isinstance(value, bool):
        raise SpecError(f"{value!r} is a bool; give a cron string, '@every 30s', or seconds")
    if isinstance(value, (int, float)):
        return ParsedSchedule(_interval_from_seconds(value))
    if isinstance(value, timedelta):
        return ParsedSchedule(_interval_from_seconds(value.total_seconds()))
    if isinstance(value, str):
        return _parse_string(value.strip(), tz)
    if isinstance(value, datetime):
        return ParsedSchedule(_at(value, tz))
    return ParsedSchedule(_translated(value, tz))


def _translated(value: object, tz: str) -> ScheduleSpec:
    """A value the Celery edge translated (a ``crontab``, a ``solar``, a custom class)."""
    if isinstance(value, CronFields):
        return _parse_cron(value.fields, " ".join(value.fields), tz, value.days)
    if isinstance(value, SolarFields):
        return solar_spec(value.event, value.lat, value.lon, tz)
    if isinstance(value, CustomObject):
        return custom_spec(value.obj, tz)
    raise SpecError(
        f"{type(value).__name__} is not a supported schedule; use a cron string, "
        "'@every 30s', '@at <instant>', '@solar <event> <lat> <lon>', an RRULE, a number of "
        "seconds, a timedelta, an aware datetime, crontab(), schedule(), solar() or a "
        "schedule class with next_after()"
    )


_AT_EXAMPLE = "e.g. '@at 2026-12-24T18:00:00+01:00'"


def _at(moment: datetime, tz: str) -> AtSpec:
    """One tick at an aware instant; a naive one is refused (which zone would it be in?)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise SpecError(
            f"@at {moment.isoformat()} has no UTC offset; give the offset, {_AT_EXAMPLE}"
        )
    ms = (moment - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)
    return AtSpec(ms, tz)


def _parse_at(text: str, tz: str) -> AtSpec:
    instant = text[len("@at") :].strip()
    try:
        moment = datetime.fromisoformat(instant)
    except ValueError:
        shown = repr(instant) if len(instant) <= 60 else "the instant"
        raise SpecError(f"{shown} after @at is not an ISO 8601 instant; {_AT_EXAMPLE}") from None
    return _at(moment, tz)


def _interval_from_seconds(seconds: int | float) -> IntervalSpec:
    """An int stays an int (one past the float range is refused, not an OverflowError)."""
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise SpecError(f"an interval of {seconds!r} s is not a number; give e.g. 30")
    if seconds > SECONDS_MAX:
        raise SpecError(_too_long(f"an interval of {show_number(seconds)} s"))
    every_ms = round(seconds * 1000) if seconds > 0 else 0  # -1e308 * 1000 is -inf
    if every_ms < 1:
        shown = show_number(seconds)
        raise SpecError(f"an interval of {shown} s is not positive; give at least 0.001")
    return IntervalSpec(every_ms)


def _too_long(what: str) -> str:
    return f"{what} is longer than 100 years; give at most {SECONDS_MAX} seconds"


def _parse_string(text: str, tz: str) -> ParsedSchedule:
    cron_tz: str | None = None
    prefixed = _CRON_TZ.fullmatch(text)
    if prefixed:
        cron_tz, text = prefixed.group(1), prefixed.group(2).strip()
    if text.startswith("@at"):
        if cron_tz is not None:
            raise SpecError("@at names its instant with an offset; remove CRON_TZ= (use tz)")
        return ParsedSchedule(_parse_at(text, tz))
    if text.startswith("@every"):
        if cron_tz is not None:
            raise SpecError("an interval is aligned to the Unix epoch in UTC; remove CRON_TZ=")
        return ParsedSchedule(_parse_every(text))
    if text.startswith("@solar"):
        if cron_tz is not None:
            raise SpecError("a solar event is an instant, the same in every zone; remove CRON_TZ=")
        return ParsedSchedule(parse_solar(text, tz))
    if is_rrule_text(text):
        if cron_tz is not None:
            raise SpecError("a recurrence rule names its zone with DTSTART;TZID=; remove CRON_TZ=")
        rule, tzid = parse_rrule(text, tz)
        return ParsedSchedule(rule, tzid)
    fields = tuple(NICKNAMES.get(text.lower(), text).split())
    return ParsedSchedule(_parse_cron(fields, text, cron_tz or tz), cron_tz)


def _parse_cron(
    fields: tuple[str, ...], text: str, tz: str, days: DayRule | None = None
) -> CronSpec:
    """Check cron fields (``text`` is how the user wrote them, for messages)."""
    if len(fields) not in (5, 6):
        raise SpecError(
            f"{text!r} has {len(fields)} fields; a cron expression has 5 "
            "(minute hour day month weekday) or 6 (a leading seconds field)"
        )
    if any(_RANDOM_FIELD.fullmatch(field) for field in fields):
        raise SpecError(
            f"{text!r} uses a random or hashed field (R, H), which would differ between beat "
            "processes; write the minute, hour etc. out"
        )
    if any(_equal_range(field) for field in fields):
        raise SpecError(
            f"{text!r} has a range with equal ends such as 5-5, which croniter reads as the "
            "whole field; write the single value (5) instead"
        )
    problem = _extension_problem(fields[_DOM], fields[_DOW])
    if problem is not None:
        raise SpecError(f"{text!r} {problem}")
    if not croniter.is_valid(" ".join(fields), second_at_beginning=len(fields) == 6):
        raise SpecError(f"{text!r} is not a valid cron expression; check each field's range")
    spec = CronSpec(fields, tz, days)
    _check_union(spec, text)
    return spec


# -- the cron extensions of SPEC §18: L, <weekday>#<n>, L<weekday> ------------------------------
_NTH_ITEM = re.compile(r"(\w+(?:-\w+)?)#(\d+)|L(\w+)", re.ASCII | re.IGNORECASE)
"""A day-of-week item naming the n-th (``5#2``, ``fri#2``) or last (``L5``) weekday of a month."""
_LAST_AFTER = re.compile(r"\w+L", re.ASCII | re.IGNORECASE)
"""Quartz's spelling of the last weekday (``5L``), which croniter does not read."""
_LAST_DAY_ITEM = re.compile(r"L|\d+-L(/\d+)?", re.ASCII | re.IGNORECASE)
"""The day-of-month forms of ``L`` croniter reads: the last day, or the end of a range."""


def _extension_problem(dom: str, dow: str) -> str | None:
    """What is wrong with the ``L`` and ``#`` items of the day fields, in words, or None.

    Checked before croniter's own parser so that each refusal says what to write instead;
    croniter refuses most of these forms too, but with a message that names no fix, and it
    accepts one mix (plain weekdays covering the whole week next to ``5#2``) that it then reads
    as ``5#2`` alone.
    """
    for item in dom.split(","):
        if "l" in item.lower() and not _LAST_DAY_ITEM.fullmatch(item):
            return (
                f"has {item!r} in the day-of-month field, where L is the month's last day, "
                "alone (L) or ending a range (15-L); for the last such weekday write L5 "
                "(the last Friday) in the day-of-week field"
            )
    nth, plain = [], []
    for item in dow.split(","):
        found = _NTH_ITEM.fullmatch(item)
        if found is None:
            if item.upper() == "L" or _LAST_AFTER.fullmatch(item):
                day = item[:-1] if item[:-1].isdigit() else "5"
                return (
                    f"has {item!r} in the day-of-week field; the month's last such weekday is "
                    f"L<weekday>: write L{day} (L5 is the last Friday); the month's last day "
                    "is L in the day-of-month field"
                )
            plain.append(item)
            continue
        count, last = found.group(2), found.group(3)
        if count is not None and not 1 <= int(count) <= 5:
            return (
                f"has {item!r}: # counts a weekday's occurrences in the month, 1 to 5 "
                f"(5#2 is the second Friday); for the last one write L{found.group(1)}"
            )
        if last is not None and not last.isdigit():
            return f"has {item!r}; L takes the weekday as a number 0-7, e.g. L5 (the last Friday)"
        nth.append(item)
    if nth and plain:
        return (
            f"mixes plain weekdays ({','.join(plain)}) with {','.join(nth)} in the day-of-week "
            "field, which croniter cannot combine (it refuses the mix or reads only "
            f"{','.join(nth)}); write two schedules, one with each"
        )
    return None


def _check_union(spec: CronSpec, text: str) -> None:
    """Refuse the "either" day rule with ``#``/``L<weekday>`` and a restricted day of month.

    croniter unites the two day fields only while neither uses ``#``, ``L<weekday>`` or ``W``;
    otherwise it still requires both to match: ``0 9 L * 5#2`` finds no date at all, and
    ``0 9 13 * L5`` neither, while ``0 9 1,L * L5`` fires on the last Friday only. Two
    schedules say the union exactly. A ``*`` day of month (or ``?``) is every day, which the
    occurrence engine hands croniter as such, so that rule stays accepted. ``W`` (not one of
    SPEC §18's forms) has the same limit and is not refused here yet.
    """
    dom, dow = spec.fields[_DOM], spec.fields[_DOW]
    if spec.day_rule is not DayRule.EITHER or dom in ("*", "?"):
        return
    if not any(_NTH_ITEM.fullmatch(item) for item in dow.split(",")):
        return
    by_day, by_weekday = list(spec.fields), list(spec.fields)
    by_day[_DOW] = by_weekday[_DOM] = "*"
    raise SpecError(
        f"{text!r} restricts both day fields, so a day matching either should fire "
        f"(crontab(5)), but croniter cannot search {dom} or {dow}: it finds no date or only "
        f"days matching both; write two schedules, {' '.join(by_day)!r} and "
        f"{' '.join(by_weekday)!r}"
    )


def _equal_range(field: str) -> bool:
    """Whether a field holds a range like ``5-5`` or ``MON-mon`` (classic cron: one value)."""
    for item in field.split(","):
        low, dash, high = item.partition("/")[0].partition("-")
        if dash and _range_end(low) == _range_end(high):
            return True
    return False


def _range_end(text: str) -> str:
    """A range end compared as written: leading zeros dropped from ASCII digits (``05`` is
    ``5``), anything else (names, Unicode digits such as ``²``) lower-cased."""
    if text.isascii() and text.isdigit():
        return text.lstrip("0") or "0"
    return text.lower()


def _parse_every(text: str) -> IntervalSpec:
    by_ms = _EVERY_MS.fullmatch(text)
    if by_ms:
        every_ms = _whole(by_ms.group(1))
    else:
        by_unit = _EVERY_UNIT.fullmatch(text)
        if not by_unit:
            raise SpecError(f"{text!r} is not an interval; write '@every:<ms>' or '@every 30s'")
        every_ms = _whole(by_unit.group(1)) * _UNIT_MS[by_unit.group(2)]
    if every_ms < 1:
        raise SpecError(f"{text!r} is not a positive interval")
    if every_ms > INTERVAL_MAX_MS:
        raise SpecError(_too_long(repr(text) if len(text) <= 40 else "the interval"))
    return IntervalSpec(every_ms)


def _whole(digits: str) -> int:
    """ASCII digits as an int; past 30 significant digits (far beyond any bound), a number
    just over the bound, so that Python's int parsing never meets a megabyte of digits."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= 30 else INTERVAL_MAX_MS + 1


def spec_to_json(spec: ScheduleSpec) -> dict[str, Any]:
    if isinstance(spec, IntervalSpec):
        return {"kind": "interval", "every_ms": spec.every_ms}
    if isinstance(spec, AtSpec):
        return {"kind": "at", "at_ms": spec.at_ms, "tz": spec.tz}
    if not isinstance(spec, CronSpec):
        return _kind_to_json(spec)
    data: dict[str, Any] = {"kind": "cron", "fields": list(spec.fields), "tz": spec.tz}
    if spec.day_rule is not legacy_day_rule(spec.fields):
        # Written only where it differs from how a stored row without it is read, so that the
        # JSON (and the definition hash) of every schedule whose meaning did not change stays
        # byte for byte what earlier releases stored: config sync sees "unchanged".
        data["days"] = spec.day_rule.value
    return data


def spec_from_json(data: dict[str, Any]) -> ScheduleSpec:
    if data["kind"] == "interval":
        return IntervalSpec(int(data["every_ms"]))
    if data["kind"] == "cron":
        fields = tuple(data["fields"])
        days = DayRule(data["days"]) if "days" in data else legacy_day_rule(fields)
        return CronSpec(fields, data["tz"], days)
    if data["kind"] == "at":
        return AtSpec(int(data["at_ms"]), data["tz"])
    if data["kind"] == "solar":
        return SolarSpec(data["event"], float(data["lat"]), float(data["lon"]), data["tz"])
    if data["kind"] == "rrule":
        return RRuleSpec(data["rule"], data["tz"])
    if data["kind"] == "custom":
        return CustomSpec(data["class"], data["repr"], data["tz"])
    raise ValueError(f"unknown schedule kind {data['kind']!r}")


def _kind_to_json(spec: SolarSpec | RRuleSpec | CustomSpec) -> dict[str, Any]:
    """The kinds of SPEC §18, each under its own ``kind``."""
    if isinstance(spec, SolarSpec):
        return {
            "kind": "solar",
            "event": spec.event,
            "lat": spec.lat,
            "lon": spec.lon,
            "tz": spec.tz,
        }
    if isinstance(spec, RRuleSpec):
        return {"kind": "rrule", "rule": spec.rule, "tz": spec.tz}
    return {"kind": "custom", "class": spec.path, "repr": spec.shown, "tz": spec.tz}


def exclusions_from_json(data: dict[str, Any]) -> Exclusions:
    """A stored ``{"tz": ..., "dates": [...]}`` (``Definition.to_json``'s ``exclude``)."""
    spans = []
    for item in data["dates"]:
        if isinstance(item, str):
            day = date.fromisoformat(item)
            spans.append((day, day))
        else:
            spans.append((date.fromisoformat(item["from"]), date.fromisoformat(item["to"])))
    return Exclusions(data["tz"], tuple(spans))
