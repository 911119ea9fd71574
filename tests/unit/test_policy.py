"""The missed-run planner (SPEC §4): properties against an independent count of due ticks."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_durable_beat.model import MissedPolicy, Reason
from celery_durable_beat.policy import MAX_COUNTED, Dropped, Plan, latest_ticks, plan
from celery_durable_beat.schedules import (
    MAX_ENUMERATION,
    CronSpec,
    IntervalSpec,
    ScheduleSpec,
    next_tick,
    parse_schedule,
)

from ._support import TRANSITIONS_MS, ZONES, ms

pytestmark = pytest.mark.unit

MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000
T0 = ms("2026-01-01T00:00:00+00:00")
SKIP, RUN_ONCE, BACKFILL = MissedPolicy.SKIP, MissedPolicy.RUN_ONCE, MissedPolicy.BACKFILL
PROPERTY = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def due_ticks(spec: ScheduleSpec, first: int, now: int) -> list[int]:
    """The truth for small windows: the planned tick and every tick after it up to now."""
    ticks = [first] if first <= now else []
    while ticks and (following := next_tick(spec, ticks[-1])) <= now:
        ticks.append(following)
    return ticks


def check_accounting(result: Plan, due: Sequence[int], now: int) -> None:
    """Invariants every plan keeps, whatever the policy."""
    assert all(t <= now for t in result.fire)
    assert list(result.fire) == sorted(set(result.fire))
    assert set(result.fire) <= set(due)
    assert len(result.fire) + result.dropped_count == len(due)
    assert result.next_tick_ms > now
    for dropped in result.dropped:
        assert dropped.exact
        assert dropped.count >= 1
        assert dropped.first_ms <= dropped.last_ms


crons = st.builds(
    CronSpec,
    st.sampled_from(
        [
            ("*/5", "*", "*", "*", "*"),
            ("0", "*", "*", "*", "*"),
            ("30", "2", "*", "*", "*"),
            ("*/20", "*", "*", "*", "*", "*"),
            ("0,15,40", "1-3", "*", "*", "*"),
            ("*/15", "*", "*", "*", "1-5"),
        ]
    ),
    st.sampled_from(ZONES),
)
small_intervals = st.sampled_from([1000, 7_000, 60_000, 90_000, 3_600_000]).map(IntervalSpec)
policies = st.sampled_from(list(MissedPolicy))


@st.composite
def small_windows(draw: st.DrawFn) -> tuple[ScheduleSpec, int, int]:
    spec = draw(st.one_of(crons, small_intervals))
    around = draw(st.sampled_from(sorted(TRANSITIONS_MS.values())))
    first = next_tick(spec, around + draw(st.integers(-6 * HOUR, 6 * HOUR)))
    span = draw(
        st.one_of(
            st.integers(-HOUR, 0),
            st.integers(0, HOUR),
            st.integers(HOUR, 12 * HOUR),
            st.integers(12 * HOUR, 4 * DAY),
        )
    )
    return spec, first, first + span


@PROPERTY
@given(window=small_windows(), missed=policies, backfill_max=st.integers(1, 40))
def test_plan_accounts_for_every_due_tick(
    window: tuple[ScheduleSpec, int, int], missed: MissedPolicy, backfill_max: int
) -> None:
    spec, first, now = window
    due = due_ticks(spec, first, now)
    result = plan(spec, first, now, missed, backfill_max)
    if not due:
        assert result == Plan((), first)
        return
    check_accounting(result, due, now)
    assert result.next_tick_ms == next_tick(spec, due[-1]) == next_tick(spec, now)
    expected = {SKIP: due[-1:], RUN_ONCE: due[:1], BACKFILL: due[-backfill_max:]}[missed]
    assert list(result.fire) == expected
    assert len(result.fire) <= (backfill_max if missed is BACKFILL else 1)
    fired = set(expected)
    dropped = [t for t in due if t not in fired]
    if dropped:
        assert result.dropped == (Dropped(Reason.MISSED, len(dropped), dropped[0], dropped[-1]),)
    else:
        assert result.dropped == ()


@PROPERTY
@given(
    every=st.integers(1, 10 * MINUTE),
    first_slot=st.integers(-(10**6), 10**6),
    due_count=st.integers(1, 5 * MAX_ENUMERATION),
    extra=st.integers(0, 10 * MINUTE),
    missed=policies,
    backfill_max=st.integers(1, MAX_ENUMERATION),
)
def test_interval_plans_count_by_arithmetic(
    every: int,
    first_slot: int,
    due_count: int,
    extra: int,
    missed: MissedPolicy,
    backfill_max: int,
) -> None:
    """Both paths, under and over the enumeration bound, checked against plain arithmetic."""
    spec = IntervalSpec(every)
    first = T0 // every * every + first_slot * every
    last = first + (due_count - 1) * every
    now = last + extra % every
    result = plan(spec, first, now, missed, backfill_max)
    keep = {SKIP: 1, RUN_ONCE: 1, BACKFILL: min(backfill_max, due_count)}[missed]
    assert len(result.fire) == keep
    assert len(result.fire) + result.dropped_count == due_count
    assert result.next_tick_ms == last + every
    if missed is RUN_ONCE:
        assert result.fire == (first,)
        dropped_range = (first + every, last)
    else:
        assert result.fire == tuple(range(last - (keep - 1) * every, last + 1, every))
        dropped_range = (first, last - keep * every)
    if due_count > keep:
        (dropped,) = result.dropped
        assert (dropped.reason, dropped.exact) == (Reason.MISSED, True)
        assert (dropped.first_ms, dropped.last_ms) == dropped_range
    else:
        assert result.dropped == ()


def test_spec_table() -> None:
    """SPEC §4's table on one small example: six ticks due, one a minute, 30 s past the last."""
    spec = IntervalSpec(MINUTE)
    due = [T0 + i * MINUTE for i in range(6)]
    now = due[-1] + 30_000
    table = {
        (SKIP, 10): ((due[5],), Dropped(Reason.MISSED, 5, due[0], due[4])),
        (RUN_ONCE, 10): ((due[0],), Dropped(Reason.MISSED, 5, due[1], due[5])),
        (BACKFILL, 3): ((due[3], due[4], due[5]), Dropped(Reason.MISSED, 3, due[0], due[2])),
    }
    for (missed, backfill_max), (fire, dropped) in table.items():
        assert plan(spec, due[0], now, missed, backfill_max) == Plan(
            fire, T0 + 6 * MINUTE, (dropped,)
        )
    assert plan(spec, due[0], now, BACKFILL, 10) == Plan(tuple(due), T0 + 6 * MINUTE)


@pytest.mark.parametrize("missed", list(MissedPolicy))
def test_single_late_tick_fires_late(missed: MissedPolicy) -> None:
    spec = parse_schedule("0 3 * * *", "Europe/Berlin").spec
    tick = next_tick(spec, T0)
    assert plan(spec, tick, tick + 5 * HOUR, missed) == Plan((tick,), tick + DAY)


@pytest.mark.parametrize("missed", list(MissedPolicy))
def test_nothing_due_yet(missed: MissedPolicy) -> None:
    assert plan(IntervalSpec(MINUTE), T0 + MINUTE, T0, missed) == Plan((), T0 + MINUTE)
    assert plan(IntervalSpec(MINUTE), T0, T0, missed) == Plan((T0,), T0 + MINUTE)


@pytest.mark.parametrize("backfill_max", [0, -1, MAX_ENUMERATION + 1])
def test_backfill_max_is_bounded(backfill_max: int) -> None:
    with pytest.raises(ValueError, match=r"outside 1\.\.1000"):
        plan(IntervalSpec(MINUTE), T0, T0 + HOUR, BACKFILL, backfill_max)


def test_max_lateness_drops_too_late_ticks() -> None:
    spec = IntervalSpec(MINUTE)
    now = T0 + 10 * MINUTE + 1
    result = plan(spec, T0, now, BACKFILL, backfill_max=5, max_lateness_ms=3 * MINUTE)
    # due: T0..T0+10m; fired candidates T0+6m..T0+10m; later than 3 min: 6m, 7m (and 7m = 3m+1ms)
    assert result.fire == (T0 + 8 * MINUTE, T0 + 9 * MINUTE, T0 + 10 * MINUTE)
    assert result.dropped == (
        Dropped(Reason.MISSED, 6, T0, T0 + 5 * MINUTE),
        Dropped(Reason.TOO_LATE, 2, T0 + 6 * MINUTE, T0 + 7 * MINUTE),
    )
    assert result.next_tick_ms == T0 + 11 * MINUTE
    assert result.dropped_count == 8


def test_a_single_tick_can_be_too_late() -> None:
    spec = parse_schedule("0 3 * * *").spec
    tick = next_tick(spec, T0)
    result = plan(spec, tick, tick + HOUR, SKIP, max_lateness_ms=HOUR - 1)
    assert result == Plan((), tick + DAY, (Dropped(Reason.TOO_LATE, 1, tick, tick),))
    assert plan(spec, tick, tick + HOUR, SKIP, max_lateness_ms=HOUR).fire == (tick,)


def test_lateness_is_measured_from_the_jittered_dispatch_instant() -> None:
    spec = IntervalSpec(MINUTE)

    def jitter(tick: int) -> int:
        return 30_000 if tick == T0 else 0

    result = plan(spec, T0, T0 + 45_000, SKIP, max_lateness_ms=20_000, jitter_ms=jitter)
    assert result.fire == (T0,)  # dispatch planned at +30 s, now +45 s: 15 s late
    result = plan(spec, T0, T0 + 45_000, SKIP, max_lateness_ms=20_000)
    assert result.dropped == (Dropped(Reason.TOO_LATE, 1, T0, T0),)


@PROPERTY
@given(
    window=small_windows(),
    missed=policies,
    backfill_max=st.integers(1, 20),
    lateness=st.integers(0, 3 * HOUR),
)
def test_lateness_never_loses_a_tick(
    window: tuple[ScheduleSpec, int, int], missed: MissedPolicy, backfill_max: int, lateness: int
) -> None:
    spec, first, now = window
    due = due_ticks(spec, first, now)
    result = plan(spec, first, now, missed, backfill_max, max_lateness_ms=lateness)
    if not due:
        return
    check_accounting(result, due, now)
    assert all(now - t <= lateness for t in result.fire)
    too_late = [d for d in result.dropped if d.reason is Reason.TOO_LATE]
    assert all(now - d.last_ms > lateness for d in too_late)


# --- past the enumeration bound ----------------------------------------------------------


def test_exactly_the_bound_stays_on_the_enumerated_path() -> None:
    spec = IntervalSpec(1000)
    result = plan(spec, T0, T0 + 999_000, BACKFILL, MAX_ENUMERATION)
    assert len(result.fire) == MAX_ENUMERATION
    assert result.dropped == ()
    result = plan(spec, T0, T0 + 1_000_000, BACKFILL, MAX_ENUMERATION)
    assert result.fire[0] == T0 + 1000
    assert result.dropped == (Dropped(Reason.MISSED, 1, T0, T0),)


FIVE_DAYS_OF_MINUTES = 5 * 24 * 60 + 1  # both ends due


@pytest.mark.parametrize(
    ("missed", "backfill_max", "fired", "dropped_range"),
    [
        (SKIP, 10, 1, (T0, T0 + 5 * DAY - MINUTE)),
        (RUN_ONCE, 10, 1, (T0 + MINUTE, T0 + 5 * DAY)),
        (BACKFILL, 10, 10, (T0, T0 + 5 * DAY - 10 * MINUTE)),
        (BACKFILL, MAX_ENUMERATION, MAX_ENUMERATION, (T0, T0 + 5 * DAY - 1000 * MINUTE)),
    ],
)
def test_cron_down_for_five_days(
    missed: MissedPolicy, backfill_max: int, fired: int, dropped_range: tuple[int, int]
) -> None:
    spec = parse_schedule("* * * * *", "Europe/Berlin").spec
    now = T0 + 5 * DAY + 30_000
    result = plan(spec, T0, now, missed, backfill_max)
    assert len(result.fire) == fired
    assert result.next_tick_ms == T0 + 5 * DAY + MINUTE
    if missed is RUN_ONCE:
        assert result.fire == (T0,)
    else:
        assert result.fire == tuple(T0 + 5 * DAY - i * MINUTE for i in reversed(range(fired)))
    assert result.dropped == (Dropped(Reason.MISSED, FIVE_DAYS_OF_MINUTES - fired, *dropped_range),)


def test_cron_overflow_across_a_fold() -> None:
    """The repeated hour is counted twice for a wildcard entry even on the overflow path."""
    spec = parse_schedule("* * * * *", "America/New_York").spec
    first = TRANSITIONS_MS["ny-fall"] - 12 * HOUR
    now = TRANSITIONS_MS["ny-fall"] + 12 * HOUR
    result = plan(spec, first, now, SKIP)
    assert result.fire == (now,)
    assert result.dropped == (Dropped(Reason.MISSED, 24 * 60, first, now - MINUTE),)


def test_cron_overflow_count_is_a_lower_bound_past_max_counted() -> None:
    spec = parse_schedule("* * * * * *").spec
    now = T0 + DAY
    result = plan(spec, T0, now, SKIP)
    assert result.fire == (now,)
    (dropped,) = result.dropped
    assert (dropped.count, dropped.exact) == (MAX_COUNTED, False)
    assert (dropped.first_ms, dropped.last_ms) == (T0, now - 1000)
    assert result.next_tick_ms == now + 1000


@pytest.mark.parametrize("missed", list(MissedPolicy))
def test_interval_overflow_of_a_long_outage(missed: MissedPolicy) -> None:
    spec = parse_schedule("@every 1s").spec
    now = T0 + 30 * DAY + 500
    result = plan(spec, T0, now, missed, backfill_max=50)
    due = 30 * 24 * 3600 + 1
    assert len(result.fire) + result.dropped_count == due
    assert result.next_tick_ms == T0 + 30 * DAY + 1000
    assert result.fire[-1] == (T0 if missed is RUN_ONCE else T0 + 30 * DAY)


# --- latest_ticks -------------------------------------------------------------------------


def test_latest_ticks_of_an_interval() -> None:
    spec = IntervalSpec(MINUTE)
    assert latest_ticks(spec, T0, T0 + 10 * MINUTE + 5, 3) == [
        T0 + 8 * MINUTE,
        T0 + 9 * MINUTE,
        T0 + 10 * MINUTE,
    ]
    assert latest_ticks(spec, T0 + 9 * MINUTE - 1, T0 + 10 * MINUTE, 5) == [
        T0 + 9 * MINUTE,
        T0 + 10 * MINUTE,
    ]


@pytest.mark.parametrize("k", [1, 7, 999, MAX_ENUMERATION])
@pytest.mark.parametrize("expr", ["* * * * * *", "*/7 * * * * *", "* * * * *", "*/30 1-3 * * *"])
def test_latest_ticks_of_a_cron(expr: str, k: int) -> None:
    spec = parse_schedule(expr, "America/New_York").spec
    now = TRANSITIONS_MS["ny-fall"] + 7_500
    floor = now - 400 * DAY
    found = latest_ticks(spec, floor, now, k)
    assert len(found) == k
    assert next_tick(spec, found[-1]) > now
    cursor, walked = found[0], [found[0]]
    while len(walked) < k:
        cursor = next_tick(spec, cursor)
        walked.append(cursor)
    assert found == walked


def test_latest_ticks_stops_at_the_floor() -> None:
    spec = parse_schedule("0 3 * * *").spec
    floor = next_tick(spec, T0)
    assert latest_ticks(spec, floor, floor + 2 * DAY, 10) == [floor, floor + DAY, floor + 2 * DAY]
    assert latest_ticks(spec, floor + 1, floor + 2 * DAY, 10) == [floor + DAY, floor + 2 * DAY]


def test_cron_overflow_count_is_exact_at_max_counted() -> None:
    spec = parse_schedule("* * * * * *").spec
    now = T0 + MAX_COUNTED * 1000
    result = plan(spec, T0, now, SKIP)
    assert result.dropped == (Dropped(Reason.MISSED, MAX_COUNTED, T0, now - 1000),)


def test_backfill_of_a_daily_cron_down_for_three_years() -> None:
    """The window search must converge for sparse crons too (it once gave up with ValueError)."""
    spec = parse_schedule("0 3 * * *", "Europe/Berlin").spec
    first = next_tick(spec, T0 - 3 * 365 * DAY)
    due = due_ticks(spec, first, T0)
    assert len(due) > MAX_ENUMERATION
    result = plan(spec, first, T0, BACKFILL, MAX_ENUMERATION)
    assert list(result.fire) == due[-MAX_ENUMERATION:]
    assert result.dropped == (
        Dropped(Reason.MISSED, len(due) - MAX_ENUMERATION, due[0], due[-MAX_ENUMERATION - 1]),
    )


def test_jitter_larger_than_the_interval_drops_nothing_in_normal_operation() -> None:
    """A tick is due at tick + offset: the round at one tick's dispatch instant must not treat
    a later tick whose own dispatch instant is still ahead as missed."""
    from celery_durable_beat.policy import dispatch_offset_ms
    from celery_durable_beat.schedules.spec import IntervalSpec

    spec = IntervalSpec(60_000)

    def offset(tick: int) -> int:
        return dispatch_offset_ms("j", spec, tick, 120.0)

    fired: list[int] = []
    next_tick_ms = 60_000
    for _ in range(60):  # a punctual beat: each round at the next tick's dispatch instant
        now = next_tick_ms + offset(next_tick_ms)
        result = plan(spec, next_tick_ms, now, MissedPolicy.SKIP, jitter_ms=offset)
        assert result.dropped == ()
        fired.extend(result.fire)
        next_tick_ms = result.next_tick_ms
    assert fired == [60_000 * (i + 1) for i in range(60)]
    assert max(offset(60_000 * (i + 1)) for i in range(60)) < 60_000  # bounded by the gap
    assert dispatch_offset_ms("j", spec, 60_000, 0) == 0


def test_a_tick_whose_jittered_instant_is_ahead_is_not_due_yet() -> None:
    from celery_durable_beat.schedules.spec import IntervalSpec

    spec = IntervalSpec(60_000)
    waiting = plan(spec, 60_000, 61_000, MissedPolicy.SKIP, jitter_ms=lambda _tick: 5_000)
    assert waiting == Plan((), 60_000)
    later = plan(spec, 60_000, 125_000, MissedPolicy.SKIP, jitter_ms=lambda tick: 5_000)
    assert later.fire == (120_000,) and later.next_tick_ms == 180_000
