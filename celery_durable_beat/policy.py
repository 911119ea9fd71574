"""The missed-run planner: which due ticks fire now, which are dropped, and what comes next.

Pure: it takes the schedule's next planned tick and ``now`` and returns a :class:`Plan`. The
rules are SPEC §4's table:

==========  ================================================================================
policy      fires when more than one occurrence is due
==========  ================================================================================
skip        only the latest due occurrence
run_once    one catch-up for the earliest missed occurrence; continues from the next future one
backfill    the ``backfill_max`` most recent due occurrences, oldest first
==========  ================================================================================

A single due occurrence fires late rather than being skipped. ``max_lateness`` then drops any
occurrence about to fire later than that after its planned dispatch instant (reason
``too_late``). Dropped occurrences are summarised, never silent. Enumeration is bounded to
:data:`MAX_ENUMERATION` ticks; past that, the ticks to fire are found by a bounded backward
search and the dropped ones are counted (exactly for intervals, by bounded enumeration for cron).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from celery_durable_beat.ids import jitter_offset_ms
from celery_durable_beat.model import Definition, MissedPolicy, Reason
from celery_durable_beat.schedules.bounds import LAST_MS
from celery_durable_beat.schedules.occurrences import (
    MAX_ENUMERATION,
    count_ticks,
    next_tick,
    ticks_between,
)
from celery_durable_beat.schedules.spec import AtSpec, IntervalSpec, Timeline

MAX_COUNTED = 20 * MAX_ENUMERATION
"""Most dropped cron ticks counted one by one; past that the count is a lower bound."""

_MAX_WIDENINGS = 64


@dataclass(frozen=True)
class Dropped:
    """Occurrences not fired for one reason: how many and the range."""

    reason: Reason
    count: int
    first_ms: int
    last_ms: int
    exact: bool = True


@dataclass(frozen=True)
class Plan:
    """What one round does for one schedule."""

    fire: tuple[int, ...]
    next_tick_ms: int | None
    """None when the schedule has no tick left before its ``end_at``."""
    dropped: tuple[Dropped, ...] = ()

    @property
    def dropped_count(self) -> int:
        return sum(d.count for d in self.dropped)


def plan(
    spec: Timeline,
    next_tick_ms: int,
    now_ms: int,
    missed: MissedPolicy,
    backfill_max: int = 10,
    max_lateness_ms: int | None = None,
    jitter_ms: Callable[[int], int] | None = None,
    end_ms: int | None = None,
) -> Plan:
    """Plan the round at ``now_ms`` for a schedule whose next planned tick is ``next_tick_ms``.

    With ``end_ms`` (``end_at``) ticks after it are not occurrences at all: they are neither
    fired nor counted as missed, and a plan with none left has next tick None.
    """
    if not 1 <= backfill_max <= MAX_ENUMERATION:
        raise ValueError(f"backfill_max {backfill_max} is outside 1..{MAX_ENUMERATION}")
    horizon = now_ms if end_ms is None else min(now_ms, end_ms)
    if next_tick_ms > horizon:
        return Plan((), _until(next_tick_ms, end_ms))
    head = [next_tick_ms, *ticks_between(spec, next_tick_ms, horizon, MAX_ENUMERATION - 1)]
    following = next_tick(spec, head[-1])
    if following > horizon:
        if jitter_ms is not None:
            head, following = _jittered_due(head, following, now_ms, jitter_ms)
            if not head:
                return Plan((), next_tick_ms)
        fire, missed_ticks = _choose(head, missed, backfill_max)
        dropped = _summary(missed_ticks)
        upcoming = following
    else:
        fire, dropped, upcoming = _choose_overflow(spec, head, horizon, missed, backfill_max)
    return _apply_lateness(
        fire, _until(upcoming, end_ms), dropped, now_ms, max_lateness_ms, jitter_ms
    )


def _until(tick_ms: int, end_ms: int | None) -> int | None:
    """``tick_ms``, or None when it falls after the schedule's end or past year 9999 (where
    ``next_tick`` says a schedule has ended, SPEC §2)."""
    last = LAST_MS if end_ms is None else min(end_ms, LAST_MS)
    return None if tick_ms > last else tick_ms


def first_tick(definition: Definition, now_ms: int) -> int | None:
    """Where a schedule planned from now starts: its first tick after now and not before
    ``start_at``; None when that is after ``end_at`` (the schedule is over)."""
    after = now_ms if definition.start_at_ms is None else max(now_ms, definition.start_at_ms - 1)
    return _until(next_tick(definition.timeline, after), definition.end_at_ms)


def first_tick_ms(definition: Definition, now_ms: int) -> int | None:
    """Where a new or changed schedule starts (config sync and ``DurableBeat.upsert`` alike):
    its first tick after now within its bounds."""
    return first_tick(definition, now_ms)


def unfired_at(definition: Definition, first_tick_ms: int | None) -> int | None:
    """The instant of an ``@at`` schedule that is already past as it is stored, or None.

    SPEC §15: such a tick never fires; the store records it ``skipped`` (reason ``missed``)
    once, when the schedule is created. An instant outside ``start_at``/``end_at`` is no
    occurrence at all, so it is not missed either.
    """
    spec = definition.spec
    if not isinstance(spec, AtSpec) or first_tick_ms is not None:
        return None
    start, end = definition.start_at_ms, definition.end_at_ms
    if (start is not None and spec.at_ms < start) or (end is not None and spec.at_ms > end):
        return None
    return spec.at_ms


def ticks_after(definition: Definition, after_ms: int, count: int) -> list[int]:
    """Up to ``count`` ticks after ``after_ms`` within the schedule's bounds (``next``)."""
    found: list[int] = []
    tick = first_tick(definition, after_ms)
    while tick is not None and len(found) < count:
        found.append(tick)
        tick = _until(next_tick(definition.timeline, tick), definition.end_at_ms)
    return found


def _jittered_due(
    head: list[int], following: int, now_ms: int, jitter_ms: Callable[[int], int]
) -> tuple[list[int], int]:
    """With jitter a tick is due at ``tick + offset``: the due ticks stop at the first one whose
    dispatch instant is still ahead, which becomes the next planned tick. (Past the enumeration
    bound, jitter is ignored: after an outage that long every tick is late anyway.)"""
    for index, tick in enumerate(head):
        if tick + jitter_ms(tick) > now_ms:
            return head[:index], tick
    return head, following


def _choose(
    due: Sequence[int], missed: MissedPolicy, backfill_max: int
) -> tuple[list[int], list[int]]:
    if missed is MissedPolicy.SKIP:
        return [due[-1]], list(due[:-1])
    if missed is MissedPolicy.RUN_ONCE:
        return [due[0]], list(due[1:])
    keep = min(backfill_max, len(due))
    return list(due[-keep:]), list(due[:-keep])


def _summary(ticks: Sequence[int], reason: Reason = Reason.MISSED) -> tuple[Dropped, ...]:
    if not ticks:
        return ()
    return (Dropped(reason, len(ticks), ticks[0], ticks[-1]),)


def _choose_overflow(
    spec: Timeline, head: Sequence[int], now_ms: int, missed: MissedPolicy, backfill_max: int
) -> tuple[list[int], tuple[Dropped, ...], int]:
    """More than MAX_ENUMERATION ticks are due: find the ones to fire without walking them all."""
    upcoming = next_tick(spec, now_ms)
    if missed is MissedPolicy.RUN_ONCE:
        fire = [head[0]]
        drop_after, drop_until = head[0], now_ms
    else:
        keep = 1 if missed is MissedPolicy.SKIP else backfill_max
        fire = latest_ticks(spec, head[0], now_ms, keep)
        drop_after, drop_until = head[0] - 1, fire[0] - 1
    count, last, exact = _count_span(spec, drop_after, drop_until)
    first = head[1] if missed is MissedPolicy.RUN_ONCE else head[0]
    return fire, (Dropped(Reason.MISSED, count, first, last, exact),), upcoming


def _count_span(spec: Timeline, after_ms: int, until_ms: int) -> tuple[int, int, bool]:
    """(count, last tick, exact) of the ticks in ``(after_ms, until_ms]``."""
    if isinstance(spec, IntervalSpec):
        return (
            count_ticks(spec, after_ms, until_ms),
            until_ms // spec.every_ms * spec.every_ms,
            True,
        )
    count, cursor, last = 0, after_ms, after_ms
    while count < MAX_COUNTED:
        chunk = ticks_between(spec, cursor, until_ms, MAX_ENUMERATION)
        if not chunk:
            return count, last, True
        count += len(chunk)
        cursor = last = chunk[-1]
    exact = next_tick(spec, cursor) > until_ms
    if not exact:
        last = latest_ticks(spec, cursor, until_ms, 1)[0]
    return count, last, exact


def latest_ticks(spec: Timeline, floor_ms: int, now_ms: int, k: int) -> list[int]:
    """The latest ``k`` ticks in ``[floor_ms, now_ms]`` (fewer if fewer exist), oldest first.

    Widens a window back from ``now_ms`` until it holds ``k`` ticks; when a window holds more
    than one enumeration allows, it bisects between the widest window known to hold too few and
    the narrowest known to hold too many. The loop is bounded.
    """
    if isinstance(spec, IntervalSpec):
        last = now_ms // spec.every_ms * spec.every_ms
        first = max(last - (k - 1) * spec.every_ms, -(-floor_ms // spec.every_ms) * spec.every_ms)
        return list(range(first, last + 1, spec.every_ms))
    narrow, wide, too_wide = 0, 1000, 0
    for _ in range(_MAX_WIDENINGS):
        start = max(floor_ms - 1, now_ms - wide)
        found = ticks_between(spec, start, now_ms, MAX_ENUMERATION)
        complete = len(found) < MAX_ENUMERATION or next_tick(spec, found[-1]) > now_ms
        if complete and (len(found) >= k or start == floor_ms - 1):
            return found[-k:]
        if complete:
            narrow = wide
            wide = (wide + too_wide) // 2 if too_wide else wide * 2
        else:
            too_wide = wide
            wide = (narrow + wide) // 2
    raise ValueError(f"no window of {k} ticks found before {now_ms}")  # pragma: no cover


def dispatch_offset_ms(name: str, spec: Timeline, tick_ms: int, jitter: float) -> int:
    """The deterministic jitter of a tick, kept below the gap to the following tick.

    Bounded like Temporal's and APScheduler's jitter, so dispatch instants keep the ticks' own
    order: a jitter larger than a schedule's period would otherwise make the next tick due
    before this one is dispatched, and ``skip`` would drop it as missed.
    """
    if jitter <= 0:
        return 0
    gap_ms = next_tick(spec, tick_ms) - tick_ms - 1
    return jitter_offset_ms(name, tick_ms, min(jitter, gap_ms / 1000))


def _apply_lateness(
    fire: list[int],
    upcoming: int | None,
    dropped: tuple[Dropped, ...],
    now_ms: int,
    max_lateness_ms: int | None,
    jitter_ms: Callable[[int], int] | None,
) -> Plan:
    if max_lateness_ms is None:
        return Plan(tuple(fire), upcoming, dropped)
    offset = jitter_ms or (lambda _tick: 0)
    late = [t for t in fire if now_ms - (t + offset(t)) > max_lateness_ms]
    on_time = tuple(t for t in fire if t not in late)
    return Plan(on_time, upcoming, dropped + _summary(late, Reason.TOO_LATE))


def due_ms(name: str, definition: Definition, tick_ms: int) -> int:
    """When a tick is dispatched: its instant plus the deterministic, bounded jitter.

    The one definition of the due instant (``next_due_ms`` of a schedule row): the round, config
    sync, resume and every store backend call it, so a jittered schedule is due at the same
    instant whichever path planned it.
    """
    return tick_ms + dispatch_offset_ms(name, definition.timeline, tick_ms, definition.jitter)


def plan_schedule(name: str, definition: Definition, next_tick_ms: int, now_ms: int) -> Plan:
    """:func:`plan` with a schedule's own policies: its missed policy, ``backfill_max``,
    ``max_lateness`` and jitter. The one place they are read for planning, so the leader's round
    and the control API's "what will the next round fire" (``show``'s ``overdue``) agree."""
    lateness = None if definition.max_lateness is None else round(definition.max_lateness * 1000)
    timeline = definition.timeline
    return plan(
        timeline,
        next_tick_ms,
        now_ms,
        definition.missed,
        definition.backfill_max,
        lateness,
        lambda tick: dispatch_offset_ms(name, timeline, tick, definition.jitter),
        definition.end_at_ms,
    )
