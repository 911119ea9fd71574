"""Clock helpers and the exception tree drawn in ``celery_durable_beat.exceptions``."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_durable_beat import exceptions
from celery_durable_beat.clock import Clock, SystemClock, datetime_to_ms, ms_to_datetime
from celery_durable_beat.exceptions import (
    ConfigError,
    ConfigProblem,
    DurableBeatError,
    ImportSourceError,
    InvalidArgument,
    LeaseError,
    OccurrenceSearchError,
    ScheduleNotFound,
    SchemaOutdated,
    StaleEpoch,
    StoreError,
    StoreUnavailable,
)

pytestmark = pytest.mark.unit


def test_system_clock_reads_this_host() -> None:
    clock: Clock = SystemClock()
    before = time.time_ns() // 1_000_000
    now = clock.now_ms()
    assert before <= now <= time.time_ns() // 1_000_000
    first = clock.monotonic()
    assert clock.monotonic() >= first


def test_ms_to_datetime() -> None:
    assert ms_to_datetime(0) == datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert ms_to_datetime(1_796_007_600_123) == datetime(
        2026, 11, 30, 3, 0, 0, 123_000, tzinfo=timezone.utc
    )
    assert ms_to_datetime(0).tzinfo is timezone.utc


def test_datetime_to_ms() -> None:
    assert datetime_to_ms(datetime(2026, 11, 30, 3, tzinfo=timezone.utc)) == 1_796_007_600_000
    berlin = datetime(2026, 11, 30, 4, tzinfo=ZoneInfo("Europe/Berlin"))
    assert datetime_to_ms(berlin) == 1_796_007_600_000
    second_pass = datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York"))
    first_pass = second_pass.replace(fold=0)
    assert datetime_to_ms(second_pass) - datetime_to_ms(first_pass) == 3_600_000
    before_epoch = datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=timezone.utc)
    assert datetime_to_ms(before_epoch) == -1  # floors, like integer division


def test_datetime_to_ms_refuses_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="is naive"):
        datetime_to_ms(datetime(2026, 1, 1))


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(-(10**12), 10**14))
def test_ms_round_trip(value: int) -> None:
    assert datetime_to_ms(ms_to_datetime(value)) == value
    assert ms_to_datetime(value) - ms_to_datetime(0) == timedelta(milliseconds=value)


# --- exceptions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "parents"),
    [
        (ConfigError, (DurableBeatError,)),
        (OccurrenceSearchError, (DurableBeatError,)),
        (ScheduleNotFound, (DurableBeatError, LookupError)),
        (StoreError, (DurableBeatError,)),
        (StoreUnavailable, (StoreError,)),
        (SchemaOutdated, (StoreError,)),
        (StaleEpoch, (StoreError,)),
        (LeaseError, (DurableBeatError,)),
        (ImportSourceError, (DurableBeatError,)),
        (InvalidArgument, (DurableBeatError, ValueError)),
    ],
)
def test_exception_tree(error: type[Exception], parents: tuple[type[Exception], ...]) -> None:
    assert all(issubclass(error, parent) for parent in parents)
    assert error.__name__ in (exceptions.__doc__ or "")


def test_every_error_derives_from_the_root() -> None:
    errors = [
        v for v in vars(exceptions).values() if isinstance(v, type) and issubclass(v, Exception)
    ]
    assert all(issubclass(e, DurableBeatError) for e in errors)


def test_config_error_lists_every_problem() -> None:
    problems = [
        ConfigProblem(
            "nightly", "tz", 'tz "Bogota" is not an IANA zone; use e.g. "America/Bogota"'
        ),
        ConfigProblem("hourly", "missed", 'missed "never" is not one of skip, run_once, backfill'),
    ]
    error = ConfigError(problems)
    assert error.problems == tuple(problems)
    assert str(error) == (
        "2 invalid schedule settings\n"
        '  - schedule "nightly": tz "Bogota" is not an IANA zone; use e.g. "America/Bogota"\n'
        '  - schedule "hourly": missed "never" is not one of skip, run_once, backfill'
    )


def test_config_error_of_one_problem_is_singular() -> None:
    error = ConfigError([ConfigProblem("a", "task", "task is missing")])
    assert str(error).splitlines() == [
        "1 invalid schedule setting",
        '  - schedule "a": task is missing',
    ]


def test_schedule_not_found_is_a_lookup_error_with_its_own_message() -> None:
    with pytest.raises(LookupError) as caught:
        raise ScheduleNotFound("nightly")
    assert caught.value.name == "nightly"  # type: ignore[attr-defined]
    assert str(caught.value) == (
        'no schedule named "nightly"; `celery -A proj durable-beat list` shows them'
    )


def test_invalid_argument_is_caught_as_value_error() -> None:
    with pytest.raises(ValueError, match="out of range"):
        raise InvalidArgument("limit 5000 out of range")


def test_config_error_message_stops_at_fifty_problems_and_keeps_them_all() -> None:
    problems = [
        ConfigProblem(
            f"s{i:04d}", "backfill_max", "backfill_max 0 is not a whole number in 1..1000"
        )
        for i in range(1000)
    ]
    error = ConfigError(problems)
    lines = str(error).splitlines()
    assert lines[0] == "1000 invalid schedule settings"
    assert lines[1] == '  - schedule "s0000": backfill_max 0 is not a whole number in 1..1000'
    assert lines[50].startswith('  - schedule "s0049"')
    assert lines[51:] == ["  ... and 950 more"]
    assert len(error.problems) == 1000
