"""The occurrence engine: the ticks of a spec, in UTC epoch milliseconds.

Intervals are arithmetic on the epoch. Cron specs walk matching wall times with croniter and map
them to instants with the rules written down in :mod:`celery_durable_beat.schedules.dst`. The
spec's :class:`~celery_durable_beat.schedules.spec.DayRule` is given to croniter explicitly
(``day_or``), never left to croniter's own reading of the day fields. Every
search is bounded: past ``MAX_STEPS`` candidates (or croniter's own horizon) it raises
:class:`~celery_durable_beat.exceptions.OccurrenceSearchError` instead of looping.

Time ends at 9999-12-31 (SPEC §2, Python's ``datetime`` ends there): an occurrence that would
pass year 9999, in UTC or on the zone's wall clock, does not exist. :func:`next_tick` then
answers :data:`ENDED_MS`, past every instant a surface can show, and the planner reads any tick
past :data:`~celery_durable_beat.schedules.bounds.LAST_MS` as "no next tick", like a schedule
past its ``end_at``. No search raises ``OverflowError``.

An at spec has one tick; after it, :data:`ENDED_MS`. An :class:`ExcludedSpec` asks its base spec
and, when a tick falls on an excluded date of the exclusions' zone, jumps to the end of that
excluded span and asks again: at most one jump per span, so the search stays bounded, and a spec
without exclusions never pays for them (it is not wrapped).

Solar events, recurrence rules and custom classes (SPEC §18) answer from their own modules, each
bounded on its own; none of them is on the cron or interval path, whose cost is unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from celery_durable_beat.exceptions import OccurrenceSearchError
from celery_durable_beat.schedules.bounds import LAST_MS
from celery_durable_beat.schedules.custom import CustomSpec, next_custom_ms
from celery_durable_beat.schedules.dst import (
    WallKind,
    classify,
    fold_bounds,
    gap_end,
    instant_s,
    wall_of,
    zone,
)
from celery_durable_beat.schedules.rrule import RRuleSpec, next_rrule_ms
from celery_durable_beat.schedules.solar import SolarSpec, next_solar_ms
from celery_durable_beat.schedules.spec import (
    AtSpec,
    CronSpec,
    DayRule,
    ExcludedSpec,
    Exclusions,
    IntervalSpec,
    Timeline,
)

MAX_STEPS = 10_000
"""Most wall-time candidates one next-tick search examines."""

MAX_ENUMERATION = 1000
"""Most ticks one enumeration returns (SPEC §4: bounded per schedule per round)."""

ENDED_MS = LAST_MS + 1
"""What :func:`next_tick` answers when the next occurrence would pass year 9999: the schedule
has ended (SPEC §2)."""

_ONE_SECOND = timedelta(seconds=1)


def next_tick(spec: Timeline, after_ms: int) -> int:
    """The first tick strictly after ``after_ms``; :data:`ENDED_MS` when it would pass year
    9999 (in UTC or on the wall clock of the spec's zone)."""
    if after_ms >= LAST_MS:
        return ENDED_MS
    if isinstance(spec, IntervalSpec):
        return min((after_ms // spec.every_ms + 1) * spec.every_ms, ENDED_MS)
    if not isinstance(spec, CronSpec):
        return _next_other(spec, after_ms)
    try:
        found = _next_cron_s(spec, after_ms) * 1000
    except OverflowError:  # a wall time past 9999-12-31 in the zone: no such occurrence
        return ENDED_MS
    return min(found, ENDED_MS)


def _next_other(
    spec: AtSpec | SolarSpec | RRuleSpec | CustomSpec | ExcludedSpec, after_ms: int
) -> int:
    """The kinds off the cron hot path: one at tick, the kinds of SPEC §18 (each module answers
    None once its schedule has ended), or a spec with exclusion dates."""
    if isinstance(spec, AtSpec):
        return spec.at_ms if spec.at_ms > after_ms else ENDED_MS
    if isinstance(spec, ExcludedSpec):
        return _next_included(spec, after_ms)
    if isinstance(spec, SolarSpec):
        found = next_solar_ms(spec, after_ms)
    elif isinstance(spec, RRuleSpec):
        found = next_rrule_ms(spec, after_ms)
    else:
        found = next_custom_ms(spec, after_ms)
    return ENDED_MS if found is None else min(found, ENDED_MS)


def _next_included(spec: ExcludedSpec, after_ms: int) -> int:
    """The base spec's next tick that is not on an excluded date.

    Each tick found on an excluded date moves the search to the last millisecond of that merged
    span of dates, so the loop meets each span at most once.
    """
    exclusions = spec.exclusions
    tz = zone(exclusions.tz)
    cursor = after_ms
    for _ in range(len(exclusions.merged) + 1):
        tick = next_tick(spec.base, cursor)
        if tick > LAST_MS:
            return tick
        span = exclusions.span_of(_local_day(tick, tz))
        if span is None:
            return tick
        cursor = max(tick, _day_start_ms(span[1] + 1, tz) - 1)
    raise OccurrenceSearchError(  # pragma: no cover - each pass leaves one span behind
        f"no tick outside the {len(exclusions.merged)} excluded spans"
    )


def _local_day(tick_ms: int, tz: ZoneInfo) -> int:
    """The proleptic ordinal of the date ``tick_ms`` falls on, on the wall clock of ``tz``
    (one past 9999-12-31 for an instant whose wall clock is already in year 10000)."""
    try:
        return datetime.fromtimestamp(tick_ms // 1000, tz).toordinal()
    except (OverflowError, ValueError):
        return date.max.toordinal() + 1


def _day_start_ms(day: int, tz: ZoneInfo) -> int:
    """The first instant of the date ``day`` in ``tz``: its midnight, or the end of a gap that
    swallows midnight (fold 0 maps a missing wall time to the instant the gap begins). Past
    year 9999 it is past every tick."""
    try:
        midnight = datetime.fromordinal(day)
    except (ValueError, OverflowError):
        return ENDED_MS
    return instant_s(midnight, tz) * 1000


def excluded(exclusions: Exclusions, tick_ms: int) -> bool:
    """Whether ``tick_ms`` falls on one of the excluded dates (in their zone)."""
    return exclusions.span_of(_local_day(tick_ms, zone(exclusions.tz))) is not None


def ticks_between(
    spec: Timeline, after_ms: int, until_ms: int, limit: int = MAX_ENUMERATION
) -> list[int]:
    """Ticks ``t`` with ``after_ms < t <= until_ms``, oldest first, at most ``limit`` of them."""
    if not 0 <= limit <= MAX_ENUMERATION:
        raise ValueError(f"limit {limit} is outside 0..{MAX_ENUMERATION}")
    until_ms = min(until_ms, LAST_MS)  # nothing occurs past year 9999
    if isinstance(spec, IntervalSpec):
        first = next_tick(spec, after_ms)
        stop = min(until_ms, first + (limit - 1) * spec.every_ms)
        return list(range(first, stop + 1, spec.every_ms)) if limit else []
    ticks: list[int] = []
    cursor = after_ms
    while len(ticks) < limit:
        cursor = next_tick(spec, cursor)
        if cursor > until_ms:
            break
        ticks.append(cursor)
    return ticks


def count_ticks(spec: IntervalSpec, after_ms: int, until_ms: int) -> int:
    """How many interval ticks lie in ``(after_ms, until_ms]``, without enumerating them."""
    until_ms = min(until_ms, LAST_MS)  # nothing occurs past year 9999
    if until_ms <= after_ms:
        return 0
    return until_ms // spec.every_ms - after_ms // spec.every_ms


_MATCHER_CACHE_SIZE = 1024
_local = threading.local()


def _matcher(spec: CronSpec) -> croniter:
    """A parsed croniter for ``spec``, cached per thread.

    A croniter object carries its current position, which ``_next_wall`` moves with
    ``set_current``; one object shared between threads (a web API thread pool, say) hands one
    thread the position another thread set, i.e. a wrong tick.
    """
    cache: dict[tuple[tuple[str, ...], DayRule], croniter] | None = getattr(
        _local, "matchers", None
    )
    if cache is None:
        cache = _local.matchers = {}
    key = (spec.fields, spec.day_rule)
    found = cache.get(key)
    if found is None:
        if len(cache) >= _MATCHER_CACHE_SIZE:
            cache.clear()
        found = _croniter_for(spec)
        cache[key] = found
    return found


def _croniter_for(spec: CronSpec) -> croniter:
    """croniter told the day rule: ``day_or=False`` is an intersection, ``True`` a union.

    croniter unites the two day fields only while neither expands to "every day"; a union with
    a field that does match every day (``1-31``, ``0-6``) is every day, so those fields are
    handed over as ``*``.
    """
    either = spec.day_rule is DayRule.EITHER
    found = croniter(
        spec.expr, datetime(2000, 1, 1), second_at_beginning=spec.has_seconds, day_or=either
    )
    if either and _matches_every_day(found.expanded[2], found.expanded[4]):
        fields = list(spec.fields)
        fields[-3] = fields[-1] = "*"
        found = croniter(
            " ".join(fields), datetime(2000, 1, 1), second_at_beginning=spec.has_seconds
        )
    return found


def _matches_every_day(dom: Sequence[object], dow: Sequence[object]) -> bool:
    """Whether croniter's expanded day-of-month or day-of-week list alone is every day."""
    every_dom = dom == ["*"] or set(range(1, 32)) <= set(dom)
    every_dow = dow == ["*"] or {v % 7 for v in dow if isinstance(v, int)} == set(range(7))
    return every_dom or every_dow


def _next_wall(spec: CronSpec, wall: datetime) -> datetime:
    """The first matching wall time strictly after ``wall`` (naive, whole seconds).

    Raises OverflowError when that wall time would be past year 9999 (croniter says so with an
    ``OverflowError`` or a ``ValueError`` from ``datetime``, depending on the field).
    """
    it = _matcher(spec)
    it.set_current(wall, force=True)
    try:
        found: datetime = it.get_next(datetime)
    except CroniterBadDateError as exc:
        raise OccurrenceSearchError(
            f"cron {spec.expr!r} has no occurrence after {wall.isoformat()}"
        ) from exc
    except ValueError as exc:  # "year 10000 is out of range"
        raise OverflowError(str(exc)) from exc
    return found


def _next_cron_s(spec: CronSpec, after_ms: int) -> int:
    tz = zone(spec.tz)
    after_s = after_ms // 1000
    wall, fold = wall_of(after_s, tz)
    if fold == 0 and not spec.is_fixed_time and classify(wall, tz) is WallKind.FOLD:
        return _next_from_first_pass(spec, tz, wall, after_s)
    return _walk(spec, tz, wall, after_s)


def _walk(spec: CronSpec, tz: ZoneInfo, wall: datetime, after_s: int) -> int:
    """Scan matching wall times after ``wall`` and return the first instant after ``after_s``."""
    fixed = spec.is_fixed_time
    for _ in range(MAX_STEPS):
        candidate = _next_wall(spec, wall)
        kind = classify(candidate, tz)
        if kind is WallKind.NORMAL:
            return instant_s(candidate, tz)
        if kind is WallKind.GAP:
            change, end_wall = gap_end(candidate, tz)
            if fixed and change > after_s:
                return change
            wall = end_wall - _ONE_SECOND  # jump over the rest of the gap
            continue
        first, second = instant_s(candidate, tz, 0), instant_s(candidate, tz, 1)
        if first > after_s:
            return first
        if not fixed and second > after_s:
            return second
        wall = fold_bounds(candidate, tz)[1] - _ONE_SECOND if fixed else candidate
    raise OccurrenceSearchError(f"cron {spec.expr!r} found no tick in {MAX_STEPS} steps")


def _next_from_first_pass(spec: CronSpec, tz: ZoneInfo, wall: datetime, after_s: int) -> int:
    """A wildcard entry whose search starts inside the first pass of a fold.

    The next match inside the fold is still in the first pass; past the fold's end, the second
    pass (which restarts at the fold's first wall time) comes before anything later.
    """
    start, end = fold_bounds(wall, tz)
    candidate = _next_wall(spec, wall)
    if candidate < end:
        return instant_s(candidate, tz, 0)
    repeat = _next_wall(spec, start - _ONE_SECOND)
    if repeat < end:
        return instant_s(repeat, tz, 1)
    return _walk(spec, tz, wall, after_s)
