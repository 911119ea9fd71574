"""The occurrence engine: properties over random specs, zones and start instants.

Start instants cluster around the 2026 transitions of the test zones (and the same instants in
Kathmandu and UTC, where nothing happens), because that is where an engine goes wrong.
"""

from __future__ import annotations

import sys
import threading
import time
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_durable_beat.exceptions import OccurrenceSearchError
from celery_durable_beat.schedules import (
    MAX_ENUMERATION,
    CronSpec,
    IntervalSpec,
    ScheduleSpec,
    count_ticks,
    next_tick,
    occurrences,
    parse_schedule,
    ticks_between,
)

from ._support import TRANSITIONS_MS, ZONES, oracle_ticks

pytestmark = pytest.mark.unit

HOUR_MS = 3_600_000
PROPERTY = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def _numeric_field(low: int, high: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    step = st.integers(1, max(1, (high - low) // 2))
    return st.one_of(
        st.just("*"),
        step.map(lambda n: f"*/{n}"),
        value.map(str),
        st.lists(value, min_size=2, max_size=4, unique=True).map(
            lambda vs: ",".join(map(str, sorted(vs)))
        ),
        st.tuples(value, value, step)
        .filter(lambda t: t[0] != t[1])
        .map(lambda t: f"{min(t[:2])}-{max(t[:2])}" + (f"/{t[2]}" if t[2] > 1 else "")),
    )


@st.composite
def cron_fields(draw: st.DrawFn, seconds: bool | None = None) -> tuple[str, ...]:
    """Field combinations that fire often enough to be seen within hours of a transition."""
    minute = draw(_numeric_field(0, 59))
    hour = draw(st.one_of(st.just("*"), _numeric_field(0, 23)))
    dom = draw(st.sampled_from(["*", "*", "*", "1-31", "4,5,8,25,29", "*/2"]))
    month = draw(st.sampled_from(["*", "*", "3,4,10,11", "3-11"]))
    dow = "*" if dom != "*" else draw(st.sampled_from(["*", "*", "0", "0,6", "1-5"]))
    fields = (minute, hour, dom, month, dow)
    if seconds is None:
        seconds = draw(st.booleans())
    if seconds:
        fields = (draw(_numeric_field(0, 59)), *fields)
    return fields


around_transitions = st.builds(
    lambda at, offset: at + offset,
    st.sampled_from(sorted(TRANSITIONS_MS.values())),
    st.integers(-6 * HOUR_MS, 6 * HOUR_MS),
)
intervals = st.one_of(
    st.integers(1, 10_000), st.integers(1, 86_400_000), st.sampled_from([1000, 60_000, 3_600_000])
).map(IntervalSpec)
crons = st.builds(CronSpec, cron_fields(), st.sampled_from(ZONES))
specs = st.one_of(intervals, crons)


@PROPERTY
@given(spec=specs, start=around_transitions)
def test_next_tick_strictly_increases(spec: ScheduleSpec, start: int) -> None:
    seen, cursor = [], start
    for _ in range(40):
        following = next_tick(spec, cursor)
        assert following > cursor
        seen.append(following)
        cursor = following
    assert len(set(seen)) == len(seen)


@PROPERTY
@given(
    spec=specs,
    start=around_transitions,
    span=st.integers(0, 8 * HOUR_MS),
    limit=st.integers(0, MAX_ENUMERATION),
)
def test_ticks_between_is_bounded_and_ordered(
    spec: ScheduleSpec, start: int, span: int, limit: int
) -> None:
    ticks = ticks_between(spec, start, start + span, limit)
    assert len(ticks) <= limit
    assert all(start < t <= start + span for t in ticks)
    assert all(a < b for a, b in pairwise(ticks))


@PROPERTY
@given(
    spec=specs, start=around_transitions, span=st.integers(0, 4 * HOUR_MS), limit=st.integers(0, 60)
)
def test_ticks_between_is_repeated_next_tick(
    spec: ScheduleSpec, start: int, span: int, limit: int
) -> None:
    expected, cursor = [], start
    while len(expected) < limit:
        cursor = next_tick(spec, cursor)
        if cursor > start + span:
            break
        expected.append(cursor)
    assert ticks_between(spec, start, start + span, limit) == expected


@settings(max_examples=40, deadline=None, database=None)
@given(
    fields=cron_fields(seconds=False),
    tz=st.sampled_from(ZONES),
    start=around_transitions,
    span=st.integers(0, 5 * HOUR_MS),
)
def test_minute_crons_match_the_oracle(
    fields: tuple[str, ...], tz: str, start: int, span: int
) -> None:
    expected = oracle_ticks(fields, tz, start, start + span)
    assert ticks_between(CronSpec(fields, tz), start, start + span) == expected


@settings(max_examples=25, deadline=None, database=None)
@given(
    fields=cron_fields(seconds=True),
    tz=st.sampled_from(ZONES),
    at=st.sampled_from(sorted(TRANSITIONS_MS.values())),
    offset=st.integers(-1_200_000, 1_200_000),
    span=st.integers(0, 1_200_000),
)
def test_second_crons_match_the_oracle(
    fields: tuple[str, ...], tz: str, at: int, offset: int, span: int
) -> None:
    start = at + offset - span // 2
    expected = oracle_ticks(fields, tz, start, start + span)[:MAX_ENUMERATION]
    assert ticks_between(CronSpec(fields, tz), start, start + span) == expected


@PROPERTY
@given(every=st.integers(1, 10**9), start=st.integers(-(10**13), 10**13))
def test_intervals_are_epoch_aligned(every: int, start: int) -> None:
    spec = IntervalSpec(every)
    first = next_tick(spec, start)
    assert first % every == 0
    assert start < first <= start + every
    assert ticks_between(spec, start, start + 3 * every, 3) == [first + i * every for i in range(3)]


@PROPERTY
@given(
    every=st.integers(1, 100_000),
    start=st.integers(-(10**9), 10**9),
    span=st.integers(-1000, 2_000_000),
)
def test_count_ticks_equals_enumeration(every: int, start: int, span: int) -> None:
    spec = IntervalSpec(every)
    count = count_ticks(spec, start, start + span)
    enumerated = ticks_between(spec, start, start + span, MAX_ENUMERATION)
    if count <= MAX_ENUMERATION:
        assert count == len(enumerated)
    else:
        assert len(enumerated) == MAX_ENUMERATION
        assert count == len(range(next_tick(spec, start), start + span + 1, every))


def test_interval_examples() -> None:
    thirty = parse_schedule("@every 30s").spec
    assert ticks_between(thirty, 0, 90_000) == [30_000, 60_000, 90_000]
    assert next_tick(thirty, 29_999) == 30_000
    assert next_tick(thirty, 30_000) == 60_000
    assert next_tick(thirty, -1) == 0
    assert ticks_between(thirty, 0, 90_000, 0) == []
    assert ticks_between(thirty, 90_000, 0) == []
    assert count_ticks(thirty, 90_000, 0) == 0


def test_cron_enumeration_limits() -> None:
    spec = parse_schedule("* * * * * *").spec
    assert ticks_between(spec, 0, 10_000_000, 0) == []
    assert ticks_between(spec, 0, 10_000_000, 3) == [1000, 2000, 3000]
    assert ticks_between(spec, 10_000, 1000) == []
    assert len(ticks_between(spec, 0, 10_000_000)) == MAX_ENUMERATION


@pytest.mark.parametrize("limit", [MAX_ENUMERATION + 1, 5000, -1])
@pytest.mark.parametrize("spec", [IntervalSpec(1000), CronSpec(("*", "*", "*", "*", "*"))])
def test_ticks_between_refuses_unbounded_limits(spec: ScheduleSpec, limit: int) -> None:
    with pytest.raises(ValueError, match=r"outside 0\.\.1000"):
        ticks_between(spec, 0, 10**9, limit)


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 6,9,11 *", "0 0 0 30 2 *"])
def test_impossible_cron_raises_quickly(expr: str) -> None:
    spec = parse_schedule(expr, "Europe/Berlin").spec
    started = time.perf_counter()
    with pytest.raises(OccurrenceSearchError, match="no occurrence after"):
        next_tick(spec, TRANSITIONS_MS["berlin-spring"])
    with pytest.raises(OccurrenceSearchError):
        ticks_between(spec, 0, 10**13)
    assert time.perf_counter() - started < 1.0


def test_leap_day_cron_is_found_years_ahead() -> None:
    spec = parse_schedule("0 12 29 2 *").spec
    assert next_tick(spec, TRANSITIONS_MS["ny-spring"]) == 1_835_438_400_000  # 2028-02-29T12:00Z


def test_step_bound_raises_instead_of_looping(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every matching wall time inside a gap is skipped; with a tiny bound the walk gives up."""
    monkeypatch.setattr(occurrences, "MAX_STEPS", 1)
    spec = parse_schedule("*/30 * * * *", "America/New_York").spec
    with pytest.raises(OccurrenceSearchError, match="found no tick in 1 steps"):
        next_tick(spec, TRANSITIONS_MS["ny-spring"] - 1_800_000)


def test_matcher_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(occurrences, "_MATCHER_CACHE_SIZE", 2)
    # This thread's cache starts empty: tests run before this one in the same process (any of
    # them, under xdist) may already hold these very specs, which would never be inserted again.
    monkeypatch.setattr(occurrences._local, "matchers", {}, raising=False)
    for minute in range(1, 6):
        assert next_tick(CronSpec((str(minute), "*", "*", "*", "*")), 0) == minute * 60_000
    assert len(occurrences._local.matchers) <= 2


def test_threads_do_not_share_a_cron_position() -> None:
    """croniter objects carry a position; concurrent searches must not see each other's."""
    spec = parse_schedule("*/5 * * * *", "Europe/Berlin").spec
    starts = [TRANSITIONS_MS["berlin-spring"] + k * 30 * 86_400_000 for k in range(6)]
    wrong: list[tuple[int, int]] = []

    def work(start: int) -> None:
        for i in range(1500):
            after = start + i * 7_000
            found = next_tick(spec, after)
            if not after < found <= after + 3_600_000:
                wrong.append((after, found))

    workers = [threading.Thread(target=work, args=(s,)) for s in starts]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often enough for a shared position to show
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(switch)
    assert wrong == []
