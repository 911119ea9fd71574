"""RFC 5545 recurrence rules (SPEC §18) as deterministic ticks, read with python-dateutil.

A rule is ``DTSTART`` (optional), one or more ``RRULE`` lines and ``RDATE``/``EXDATE`` lines,
separated by newlines. dateutil expands each ``RRULE`` on *naive wall times* of the rule's zone
(the ``TZID`` of ``DTSTART``, else the schedule's ``tz``); every wall time is then mapped to an
instant exactly like a fixed-time cron entry (:mod:`~celery_durable_beat.schedules.dst`,
SPEC §5): a wall time in a spring-forward gap fires once, at the change instant; a repeated one
fires once, at its first pass. An ``HOURLY`` rule is a fixed-time entry too: across a gap its
skipped hour collapses into the change instant, and across a fold the repeated hour fires once.
As in dateutil (not its ``compatible`` mode), ``DTSTART`` is a tick only when the rule matches
it; ``EXDATE`` removes a wall time of any rule or ``RDATE``; ``COUNT`` counts before ``EXDATE``.

**No "now".** Without ``DTSTART`` dateutil starts at the current time, so a rule would mean
something else in every process. Here it starts at :data:`DEFAULT_DTSTART`, 1973-01-01T00:00:00
local, a Monday and a 1 January: every part dateutil derives from DTSTART is then the start of
its period (midnight, minute 0, second 0, the 1st, January, Monday). ``COUNT`` would count from
that arbitrary start, so it needs a DTSTART; so does an ``INTERVAL`` whose phase the default
would pick (``FREQ=WEEKLY;INTERVAL=2``: which weeks?), i.e. any but an INTERVAL that divides
the next unit (seconds and minutes of 60, hours of 24, months of 12), which lines up with the
start of each minute, hour, day or year as cron's ``*/n`` does.

**Refused when read, never later in a search:** an unknown line, parameter or rule part;
``EXRULE``; dates without a time, with a fraction of a second (ticks are whole seconds; RFC 5545
has no frequency finer than ``SECONDLY``), or outside years 1900-9999; a ``TZID`` that is not an
IANA zone; a numbered ``BYDAY`` outside ``MONTHLY``/``YEARLY`` (dateutil drops the number) or
past the 5th within a month (dateutil fails on ``FREQ=YEARLY;BYMONTH=9;BYDAY=21MO``);
``COUNT`` with ``UNTIL``, ``COUNT`` above :data:`COUNT_MAX`, periods longer than 100 years; and
a rule with no occurrence in years 1900-9999 (or before its ``UNTIL``).

**Cost independent of the distance from DTSTART.** dateutil iterates from DTSTART on every call
(a ``MINUTELY`` rule a year old: half a million steps). A rule is parsed once
(:func:`_parsed`, cached per ``(rule, tz)``) into rrules whose every part dateutil would derive
from DTSTART is explicit, with ``COUNT`` turned into the ``UNTIL`` of its last occurrence. A
query then restarts the rrule at the latest period boundary (year, month, week by ``WKST``, day,
hour, minute, second) that lies a whole number of ``INTERVAL`` periods after DTSTART's period
and not after the query's wall-time bound (the wall clock at the query instant; in a fold's
second pass the fold's last second, whose wall times already fired). dateutil's occurrences
inside a period depend only on the period and the rule's parts, so the restarted rule yields
exactly the original's occurrences from that period on; the test module proves it against
plain dateutil.

**Bounded existence check.** A rule that matches nothing makes dateutil walk to year 9999
(seconds of work). The Gregorian calendar repeats every 400 years, so a rule's pattern repeats
every ``lcm(400 years, INTERVAL periods)``: searching that one cycle, placed just before year
9999 ends (where dateutil stops by itself), decides whether it ever occurs. ``WEEKLY`` and
finer rules first check their days with a ``YEARLY`` rule over 400 years (milliseconds), and a
``BYSETPOS`` past the occurrences of a day or finer period is refused outright. Remaining
worst cases: a period holding very many occurrences (``YEARLY`` with every minute listed) is
iterated up to the query; a sub-daily INTERVAL that does not divide a day, with day parts that
its lattice never meets, walks to year 9999 once, when read; so does a large COUNT of a sparse
rule (100000 leap days that are Mondays: about 3 s, once per process).
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from functools import lru_cache
from itertools import islice
from math import lcm
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil.rrule import (
    DAILY,
    HOURLY,
    MINUTELY,
    MONTHLY,
    SECONDLY,
    WEEKLY,
    YEARLY,
    rrule,
    rrulestr,
)

from celery_durable_beat.schedules.bounds import FIRST_MS, LAST_MS, instant_problem
from celery_durable_beat.schedules.dst import (
    WallKind,
    classify,
    fold_bounds,
    gap_end,
    instant_s,
    wall_of,
    zone,
)
from celery_durable_beat.schedules.errors import SpecError
from celery_durable_beat.schedules.rrule_words import (
    COUNT_MAX,
    UNITS,
    WEEKDAYS,
    RuleFacts,
    RuleParts,
    SetFacts,
    derived_parts,
    describe,
    read_parts,
)

DEFAULT_DTSTART = datetime(1973, 1, 1)
"""Where a rule without DTSTART starts: a Monday and a 1 January, at midnight, local."""
RULE_CHARS_MAX = 64 * 1024
RRULES_MAX = 20
"""Most RRULE lines in one rule: each costs a restart per query."""

_UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)
_SECOND = timedelta(seconds=1)
_FIRST_S, _LAST_S = FIRST_MS // 1000, LAST_MS // 1000
_LAST_WALL = datetime(9999, 12, 31, 23, 59, 59)
_UNIT_S = {HOURLY: 3600, MINUTELY: 60, SECONDLY: 1}
_DAYS = 146_097
_CYCLE = {YEARLY: 400, MONTHLY: 4800, WEEKLY: _DAYS // 7, DAILY: _DAYS}
_CYCLE.update({freq: _DAYS * 86_400 // unit for freq, unit in _UNIT_S.items()})
"""Periods in the 400-year Gregorian cycle (146097 days, exactly 20871 weeks)."""
_DATE_TIME = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(Z?)", re.IGNORECASE)
_FRACTION = re.compile(r"(\d{8}T\d{6})[.,]\d+(Z?)", re.IGNORECASE)
_LINE = re.compile(r"([A-Za-z-]+)((?:;[^:;]*)*):(.*)", re.DOTALL)
_ENDS = (ValueError, OverflowError)
"""What dateutil raises building a date past 9999-12-31 (a week running into year 10000)."""


def is_rrule_text(text: str) -> bool:
    """Whether a schedule string is a recurrence rule rather than a cron string or ``@...``."""
    return text.strip().upper().startswith(("RRULE:", "DTSTART"))


@dataclass(frozen=True)
class RRuleSpec:
    """A recurrence rule as stored: its normalised text and the zone it is read in."""

    rule: str
    """The lines (DTSTART, RRULE, RDATE, EXDATE) stripped and joined with ``\\n``."""
    tz: str
    """DTSTART's TZID if given, else the schedule's tz."""

    def text(self) -> str:
        return self.rule


def parse_rrule(text: str, tz: str) -> tuple[RRuleSpec, str | None]:
    """The spec of a rule and DTSTART's TZID (None without one), or :class:`SpecError`.

    The TZID is returned so that the caller can refuse it when it contradicts an explicit
    ``tz``, as it does for ``CRON_TZ=``.
    """
    rule = "\n".join(line.strip() for line in text.strip().splitlines() if line.strip())
    parsed = _parsed(rule, tz)
    return RRuleSpec(rule, parsed.tz.key), parsed.tzid


def next_rrule_ms(spec: RRuleSpec, after_ms: int) -> int | None:
    """The first tick strictly after ``after_ms``, or None when the rule has ended (COUNT or
    UNTIL used up, or the next tick would pass year 9999)."""
    if after_ms >= LAST_MS:
        return None
    found = _next_s(_parsed(spec.rule, spec.tz), max(after_ms // 1000, _FIRST_S - 1))
    return None if found is None else found * 1000


def describe_rrule(spec: RRuleSpec) -> str:
    """The rule in words, e.g. ``monthly on the last Friday at 09:00 (Europe/Berlin)``."""
    return describe(_parsed(spec.rule, spec.tz).facts)


@dataclass(frozen=True, eq=False)
class _Rule:
    """One RRULE line: dateutil's rrule from DTSTART with every derived part explicit."""

    base: rrule
    freq: int
    interval: int
    wkst: int
    start: datetime
    until: datetime | None
    """The last wall time the rule may yield (UNTIL, or COUNT's last occurrence)."""


@dataclass(frozen=True, eq=False)
class _Parsed:
    tz: ZoneInfo
    tzid: str | None
    rules: tuple[_Rule, ...]
    rdates: tuple[datetime, ...]
    exdates: frozenset[datetime]
    facts: SetFacts


class _Reader:
    """Reads one rule text; every refusal names the rule as the user wrote it."""

    def __init__(self, rule: str, tz: str) -> None:
        self.rule = rule
        shown = " ".join(rule.splitlines())
        self.shown = shown if len(shown) <= 200 else shown[:197] + "..."
        self.schedule_tz = tz

    def refuse(self, problem: str) -> SpecError:
        return SpecError(f'rule "{self.shown}" {problem}')

    def read(self) -> _Parsed:
        if not self.rule:
            raise SpecError("a recurrence rule is empty; write e.g. RRULE:FREQ=DAILY;BYHOUR=9")
        if len(self.rule) > RULE_CHARS_MAX:
            raise self.refuse(f"is longer than {RULE_CHARS_MAX} characters; shorten it")
        lines = [self.split(line) for line in self.rule.splitlines()]
        starts = [line for line in lines if line[0] == "DTSTART"]
        if len(starts) > 1:
            raise self.refuse("has more than one DTSTART line; keep one")
        tzid = self.tzid(starts[0][1]) if starts else None
        self.tz = self.zone(tzid or self.schedule_tz, "TZID" if tzid else "tz")
        start = self.date_time("DTSTART", starts[0]) if starts else None
        rules = [value for name, _, value in lines if name == "RRULE"]
        if len(rules) > RRULES_MAX:
            raise self.refuse(f"has {len(rules)} RRULE lines; give at most {RRULES_MAX}")
        rdates = self.dates("RDATE", lines)
        exdates = frozenset(self.dates("EXDATE", lines))
        if not rules and not rdates:
            raise self.refuse("has no RRULE or RDATE line; add e.g. RRULE:FREQ=DAILY")
        made = [self.make(value, start) for value in rules]
        facts = SetFacts(
            self.rule, self.tz.key, tuple(fact for _, fact in made), start, rdates, exdates
        )
        parsed = _Parsed(self.tz, tzid, tuple(r for r, _ in made), rdates, exdates, facts)
        if _next_s(parsed, _FIRST_S - 1) is None:
            raise self.refuse(
                "has no tick in years 1900-9999 once EXDATE is applied; remove an EXDATE"
            )
        return parsed

    def split(self, line: str) -> tuple[str, list[str], str]:
        """A line as (property name upper-cased, parameters, value)."""
        match = _LINE.fullmatch(line)
        name = match.group(1).upper() if match else ""
        if name == "EXRULE":
            raise self.refuse(
                "uses EXRULE, which RFC 5545 deprecated; list the wall times to skip in EXDATE "
                "lines, or whole dates in the schedule's exclude"
            )
        if match is None or name not in ("DTSTART", "RRULE", "RDATE", "EXDATE"):
            raise self.refuse(
                f'has the line "{line[:60]}"; a rule has only DTSTART, RRULE, RDATE and '
                "EXDATE lines, each NAME:value (e.g. RRULE:FREQ=DAILY)"
            )
        params = [p.strip() for p in match.group(2).split(";")[1:]]
        allowed = ("TZID=", "VALUE=DATE-TIME") if name != "RRULE" else ()
        for param in params:
            if not allowed or not param.upper().startswith(allowed):
                raise self.refuse(self.bad_param(name, param))
        return name, params, match.group(3).strip()

    def bad_param(self, name: str, param: str) -> str:
        if param.upper() in ("VALUE=DATE", "VALUE=PERIOD"):
            return (
                f"has {name};{param}: only date-times are supported; write each value as "
                "YYYYMMDDTHHMMSS (local) or YYYYMMDDTHHMMSSZ (UTC)"
            )
        return f"has the parameter {name};{param}; only TZID= is supported (and not on RRULE)"

    def tzid(self, params: list[str]) -> str | None:
        found = [p.partition("=")[2].strip() for p in params if p.upper().startswith("TZID=")]
        return found[0] if found else None

    def zone(self, name: str, field: str) -> ZoneInfo:
        try:
            return zone(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder, "Europe"
            raise self.refuse(
                f'has {field} "{name}", which is not an IANA zone; use e.g. "Europe/Berlin"'
            ) from None

    def dates(self, name: str, lines: list[tuple[str, list[str], str]]) -> tuple[datetime, ...]:
        found = {
            self.date_time(name, (name, params, value.strip()))
            for line_name, params, whole in lines
            if line_name == name
            for value in whole.split(",")
        }
        return tuple(sorted(found))

    def date_time(self, field: str, line: tuple[str, list[str], str]) -> datetime:
        """A DTSTART, RDATE or EXDATE value as a wall time of the rule's zone."""
        _, params, value = line
        tzid = self.tzid(params)
        if tzid is not None and field != "DTSTART":
            return self.value(field, value, self.zone(tzid, f"{field};TZID"))[0]
        return self.value(field, value, self.tz)[0]

    def value(self, field: str, value: str, tz: ZoneInfo) -> tuple[datetime, int]:
        """``value`` (local in ``tz``, or UTC with ``Z``) as a wall time of the rule's zone
        and the instant (epoch s) it stands for, within years 1900-9999."""
        fraction = _FRACTION.fullmatch(value)
        if fraction:
            raise self.refuse(
                f"has {field} {value} with a fraction of a second; ticks are whole seconds "
                f"(nothing finer than SECONDLY): write {fraction.group(1)}{fraction.group(2)}"
            )
        match = _DATE_TIME.fullmatch(value)
        if match is None:
            alone = re.fullmatch(r"\d{8}", value)
            hint = f" (a date alone: write {value}T000000)" if alone else ""
            raise self.refuse(
                f'has {field} "{value}", not a date-time{hint}; write YYYYMMDDTHHMMSS '
                f"(local time in {tz.key}) or YYYYMMDDTHHMMSSZ (UTC)"
            )
        try:
            year, month, day, hour, minute, second = (int(p) for p in match.groups()[:6])
            wall = datetime(year, month, day, hour, minute, second)
            utc = bool(match.group(7))
            epoch_s = _utc_s(wall) if utc else _instant(wall, tz)
        except (ValueError, OverflowError) as exc:
            raise self.refuse(f"has {field} {value}, which is not a date ({exc})") from None
        problem = instant_problem(field, value, epoch_s * 1000, self.tz)
        if problem is not None:
            raise self.refuse(f"has {problem}")
        if utc or tz.key != self.tz.key:
            wall = wall_of(epoch_s, self.tz)[0]
        return wall, epoch_s

    def make(self, value: str, start: datetime | None) -> tuple[_Rule, RuleFacts]:
        """One RRULE line as an rrule from DTSTART, checked to occur, COUNT made UNTIL."""
        parts = read_parts(value, self.refuse)
        self.check_default_start(parts, start)
        begin = start or DEFAULT_DTSTART
        explicit = derived_parts(parts, begin)
        text = ";".join(f"{name}={part}" for name, part in explicit.items())
        try:
            plain = rrulestr(text, dtstart=begin)
        except ValueError as exc:  # e.g. "Invalid rrule byxxx generates an empty set."
            raise self.refuse(f"is a rule dateutil refuses ({exc}); check the BY parts") from None
        assert isinstance(plain, rrule)
        wkst = WEEKDAYS.index(explicit["WKST"])
        rule = _Rule(plain, parts.freq, parts.interval, wkst, begin, None)
        first = self.first(rule, explicit)
        until = None if parts.until is None else self.until(parts.until)
        if until is not None and first > until:
            raise self.refuse(
                f"ends (UNTIL={parts.until}) before its first occurrence, {first.isoformat()}; "
                "move UNTIL later or DTSTART earlier"
            )
        if parts.count is not None:
            until = _count_end(plain, parts.count)
        if until is not None:
            rule = dataclasses.replace(rule, base=plain.replace(until=until), until=until)
        shown_until = until if parts.count is None else None
        return rule, RuleFacts(parts.freq, parts.interval, explicit, parts.count, shown_until)

    def check_default_start(self, parts: RuleParts, start: datetime | None) -> None:
        """Without DTSTART, refuse what the default start would decide arbitrarily."""
        if start is not None:
            return
        if parts.count is not None:
            raise self.refuse(
                f"has COUNT={parts.count} but no DTSTART, so nothing says where counting "
                "starts; add a DTSTART line (e.g. DTSTART:20260101T090000) or use UNTIL"
            )
        aligned = {MONTHLY: 12, HOURLY: 24, MINUTELY: 60, SECONDLY: 60}.get(parts.freq, 1)
        if aligned % parts.interval:
            raise self.refuse(
                f"has INTERVAL={parts.interval} but no DTSTART, so nothing says which "
                f"{parts.unit}s it counts from; add a DTSTART line (e.g. "
                "DTSTART:20260105T090000)"
            )

    def until(self, value: str) -> datetime:
        """The last wall time UNTIL lets the rule yield: UNTIL itself when local, else the
        wall time whose tick is the last at or before the UTC instant."""
        wall, epoch_s = self.value("UNTIL", value, self.tz)
        return _bound(epoch_s, self.tz) if value.upper().endswith("Z") else wall

    def first(self, rule: _Rule, explicit: dict[str, str]) -> datetime:
        """The rule's first wall time, after checks that keep a rule matching nothing from
        walking dateutil to year 9999 (see the module docstring)."""
        never = self.refuse(
            "has no occurrence between 1900 and 9999; check BYMONTH/BYMONTHDAY (February has "
            "no day 30), BYYEARDAY, BYWEEKNO, BYSETPOS and INTERVAL against DTSTART"
        )
        if rule.freq >= WEEKLY and _days_never(explicit):
            raise never
        self.check_setpos(rule.freq, explicit)
        cycle = lcm(_CYCLE[rule.freq], rule.interval)
        room = _index(rule, _LAST_WALL) - _index(rule, rule.start) - cycle - 1
        late = None
        if room >= rule.interval:
            late = rule.base.replace(dtstart=_period_after(rule, room - room % rule.interval))
        try:
            found = None if late is not None and _first_of(late) is None else _first_of(rule.base)
        except ValueError as exc:  # dateutil's "Invalid combination of interval and byhour"
            raise self.refuse(f"is a rule dateutil cannot expand ({exc}); check RRULE") from None
        if found is None:
            raise never
        return found

    def check_setpos(self, freq: int, explicit: dict[str, str]) -> None:
        """A day or finer period holds the same times every time: BYSETPOS must pick one."""
        if "BYSETPOS" not in explicit or freq < DAILY:
            return
        size = 1
        for name, finest in (("BYHOUR", DAILY), ("BYMINUTE", HOURLY), ("BYSECOND", MINUTELY)):
            if freq <= finest:
                size *= len({int(v) for v in explicit[name].split(",")})
        if min(abs(int(p)) for p in explicit["BYSETPOS"].split(",")) > size:
            raise self.refuse(
                f"has BYSETPOS={explicit['BYSETPOS']} but each {UNITS[freq]} holds {size} "
                "occurrence(s), so it never occurs; pick a position within them"
            )


@lru_cache(maxsize=256)
def _parsed(rule: str, tz: str) -> _Parsed:
    """A rule read once per process (per rule and zone): the expensive checks and COUNT's
    expansion run here, never in a search."""
    return _Reader(rule, tz).read()


def _utc_s(wall: datetime) -> int:
    return (wall.replace(tzinfo=_UTC) - _EPOCH) // _SECOND


def _instant(wall: datetime, tz: ZoneInfo) -> int:
    """Where a fixed-time wall time fires (SPEC §5): a gap's change instant, a fold's first
    pass. OverflowError past year 9999 in UTC."""
    kind = classify(wall, tz)
    if kind is WallKind.GAP:
        return gap_end(wall, tz)[0]
    return instant_s(wall, tz)


def _bound(epoch_s: int, tz: ZoneInfo) -> datetime:
    """The wall time ``b`` such that a wall time fires after ``epoch_s`` exactly when it is
    later than ``b``: the wall clock then, or, in a fold's second pass, the fold's last second
    (its wall times fired in the first pass)."""
    wall, fold = wall_of(epoch_s, tz)
    return wall if fold == 0 else fold_bounds(wall, tz)[1] - _SECOND


def _days_never(explicit: dict[str, str]) -> bool:
    """Whether the day parts of a WEEKLY or finer rule match no day in 400 years: a YEARLY
    rule with the same day parts, over the last 400 years dateutil knows."""
    days = {k: v for k, v in explicit.items() if k in ("BYMONTHDAY", "BYYEARDAY", "BYWEEKNO")}
    if "BYDAY" in explicit:
        days["BYDAY"] = explicit["BYDAY"]
    if not days:
        return False
    month = f";BYMONTH={explicit['BYMONTH']}" if "BYMONTH" in explicit else ""
    text = ";".join(f"{k}={v}" for k, v in days.items())
    probe = rrulestr(
        f"FREQ=YEARLY;WKST={explicit['WKST']};BYHOUR=0;BYMINUTE=0;BYSECOND=0;{text}{month}",
        dtstart=datetime(9600, 1, 1),
    )
    assert isinstance(probe, rrule)
    return _first_of(probe) is None


def _walls(source: rrule) -> Iterator[datetime]:
    """dateutil's wall times, ending where it would build a date past 9999-12-31 (a week
    running into year 10000) instead of raising."""
    iterator = iter(source)
    while True:
        try:
            wall = next(iterator)
        except StopIteration:
            return
        except _ENDS as exc:
            if "out of range" not in str(exc):
                raise
            return
        yield wall


def _first_of(source: rrule) -> datetime | None:
    return next(_walls(source), None)


def _count_end(plain: rrule, count: int) -> datetime | None:
    """The wall time of the COUNT-th occurrence (or of the last one before year 9999)."""
    last = deque(islice(_walls(plain), count), maxlen=1)
    return last[0] if last else None


def _index(rule: _Rule, wall: datetime) -> int:
    """The number of the period holding ``wall`` (consecutive periods, consecutive numbers)."""
    freq = rule.freq
    if freq == YEARLY:
        return wall.year
    if freq == MONTHLY:
        return wall.year * 12 + wall.month - 1
    day = wall.toordinal()
    if freq == WEEKLY:
        return (day - (wall.weekday() - rule.wkst) % 7) // 7
    if freq == DAILY:
        return day
    seconds = ((day * 24 + wall.hour) * 60 + wall.minute) * 60 + wall.second
    return seconds // _UNIT_S.get(freq, 1)


def _period_after(rule: _Rule, periods: int) -> datetime:
    """The start of the period ``periods`` after the one holding DTSTART."""
    start, freq = rule.start, rule.freq
    if freq == YEARLY:
        return datetime(start.year + periods, 1, 1)
    if freq == MONTHLY:
        year, month = divmod(start.year * 12 + start.month - 1 + periods, 12)
        return datetime(year, month + 1, 1)
    if freq == WEEKLY:
        first = date.fromordinal(start.toordinal() - (start.weekday() - rule.wkst) % 7)
        return datetime.combine(first, time()) + timedelta(weeks=periods)
    if freq == DAILY:
        return datetime.combine(start.date(), time()) + timedelta(days=periods)
    unit = _UNIT_S.get(freq, 1)
    floor = start - timedelta(seconds=(start.minute * 60 + start.second) % unit)
    return floor + timedelta(seconds=periods * unit)


def _restarted(rule: _Rule, bound: datetime) -> rrule:
    """The rule restarted at the last period on its INTERVAL lattice that begins at or before
    ``bound``: it yields the original's occurrences from that period on."""
    periods = _index(rule, bound) - _index(rule, rule.start)
    lattice = periods - periods % rule.interval
    return rule.base if lattice <= 0 else rule.base.replace(dtstart=_period_after(rule, lattice))


def _rule_next(rule: _Rule, bound: datetime, exdates: frozenset[datetime]) -> datetime | None:
    if rule.until is not None and bound >= rule.until:
        return None
    return next(
        (w for w in _walls(_restarted(rule, bound)) if w > bound and w not in exdates), None
    )


def _rdate_next(parsed: _Parsed, bound: datetime) -> datetime | None:
    at = bisect.bisect_right(parsed.rdates, bound)
    return next((w for w in parsed.rdates[at:] if w not in parsed.exdates), None)


def _next_s(parsed: _Parsed, after_s: int) -> int | None:
    """The first tick (epoch s) after ``after_s``: the earliest wall time after the matching
    bound among the rules and RDATEs, mapped as a fixed-time wall time."""
    tz = parsed.tz
    try:
        bound = _bound(after_s, tz)
    except _ENDS:  # the wall clock is already past 9999-12-31
        return None
    found = [_rule_next(rule, bound, parsed.exdates) for rule in parsed.rules]
    found.append(_rdate_next(parsed, bound))
    walls = [wall for wall in found if wall is not None]
    if not walls:
        return None
    try:
        tick = _instant(min(walls), tz)
    except OverflowError:
        return None
    return tick if tick <= _LAST_S else None


__all__ = [
    "COUNT_MAX",
    "DEFAULT_DTSTART",
    "RRuleSpec",
    "describe_rrule",
    "is_rrule_text",
    "next_rrule_ms",
    "parse_rrule",
]
