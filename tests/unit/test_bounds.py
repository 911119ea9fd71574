"""SPEC §2's bounds: refused in the one validation path every surface uses, never a crash.

Three families: definitions validation used to accept that then broke a read (an instant past
year 9999, an interval past the store's BIGINT, an expiry of 1e308); inputs that crashed the
validator itself (a zone that is a tzdata folder, a Unicode digit in a cron range, an int past
the float range, args nested a thousand deep); and names the API's URLs cannot carry. Plus the
other side: a definition exactly at every bound is accepted and every reader answers for it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.control.check import check_config
from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.model import Definition
from celery_durable_beat.policy import first_tick, plan_schedule, ticks_after
from celery_durable_beat.schedules.bounds import (
    ARGS_BYTES_MAX,
    ARGS_DEPTH_MAX,
    FIRST_MS,
    INTERVAL_MAX_MS,
    LAST_MS,
    NAME_MAX,
    RESERVED_SUFFIXES,
    SECONDS_MAX,
    show_number,
)
from celery_durable_beat.schedules.describe import describe, describe_bounds
from celery_durable_beat.schedules.occurrences import (
    ENDED_MS,
    count_ticks,
    next_tick,
    ticks_between,
)
from celery_durable_beat.schedules.render import tick_isoformat
from celery_durable_beat.schedules.spec import CronSpec, IntervalSpec
from celery_durable_beat.schedules.validate import validate_entries, validate_entry
from celery_durable_beat.schedules.values import value_problem
from celery_durable_beat.testing import MemoryStore

pytestmark = pytest.mark.unit

NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _problems(entry: dict[str, Any], name: object = "n") -> dict[str, str]:
    """Field -> problem text of one refused entry (the validator must refuse, never raise else)."""
    with pytest.raises(ConfigError) as refused:
        validate_entry(name, {"task": "proj.t", **entry})
    return {p.field: str(p) for p in refused.value.problems}


def _nested(depth: int) -> Any:
    """A dict ``depth`` levels deep (the dict itself is level 1)."""
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def _ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)


# -- 1. accepted before, then broke a read ---------------------------------------------------
@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        (
            {"schedule": "0 3 * * *", "start_at": "0001-01-01T00:00:00+01:00"},
            "start_at",
            "start_at 0001-01-01T00:00:00+01:00 is before year 1900 in UTC; "
            "give an instant in years 1900-9999",
        ),
        (
            {"schedule": "0 3 * * *", "end_at": "9999-12-31T23:00:00-05:00"},
            "end_at",
            "end_at 9999-12-31T23:00:00-05:00 is past year 9999 in UTC",
        ),
        (
            {"schedule": "@every 1h", "start_at": "9999-12-31T23:30:00+00:00"},
            "start_at",
            "leaves no tick before the end of year 9999; give an earlier start_at",
        ),
        (
            {"schedule": "@every 3650000d"},
            "schedule",
            "'@every 3650000d' is longer than 100 years; give at most 3155760000 seconds",
        ),
        (
            {"schedule": "@every 1h", "expires": 1e308},
            "expires",
            "expires 1e+308 s is longer than 100 years",
        ),
        (
            {"schedule": "0 3 * * *", "tz": "America/New_York", "start_at": "1900-01-01T00:00Z"},
            "start_at",
            "is before year 1900 in America/New_York",
        ),
        (
            {
                "schedule": "0 3 * * *",
                "tz": "Pacific/Kiritimati",
                "end_at": "9999-12-31T20:00:00+00:00",
            },
            "end_at",
            "is past year 9999 in Pacific/Kiritimati",
        ),
        (
            {"schedule": "bad", "start_at": "0001-01-01T00:00:00+00:00"},
            "start_at",
            "is before year 1900 in UTC",
        ),
    ],
)
def test_instants_and_numbers_outside_the_bounds_are_refused(
    entry: dict[str, Any], field: str, words: str
) -> None:
    assert words in _problems(entry)[field]


# -- the pure core after year 9999: ended, never OverflowError --------------------------------
@pytest.mark.parametrize(
    ("spec", "after"),
    [
        (CronSpec(("0", "3", "*", "*", "*")), "9999-12-31T09:00:00+00:00"),  # croniter overflows
        (CronSpec(("0", "23", "*", "*", "*"), "America/New_York"), "9999-12-31T09:00:00+00:00"),
        (CronSpec(("0", "3", "*", "*", "*"), "Pacific/Kiritimati"), "9999-12-31T10:00:00+00:00"),
        (CronSpec(("0", "3", "29", "2", "*")), "9996-03-01T00:00:00+00:00"),  # "year 10000"
        (IntervalSpec(INTERVAL_MAX_MS), "9990-01-01T00:00:00+00:00"),
        (IntervalSpec(1000), "9999-12-31T23:59:59.999+00:00"),
    ],
)
def test_a_next_tick_past_year_9999_means_ended(spec: CronSpec | IntervalSpec, after: str) -> None:
    assert next_tick(spec, _ms(after)) == ENDED_MS
    definition = Definition(name="n", task="t", spec=spec)
    assert first_tick(definition, _ms(after)) is None
    assert ticks_after(definition, _ms(after), 3) == []
    assert next_tick(spec, ENDED_MS) == ENDED_MS


def test_the_last_ticks_before_the_end_of_time_are_enumerated_and_planned() -> None:
    spec = IntervalSpec(3_600_000)
    assert ticks_between(spec, LAST_MS - 3_600_000, ENDED_MS + 10**12) == [LAST_MS + 1 - 3_600_000]
    assert count_ticks(spec, LAST_MS - 3_600_000, ENDED_MS + 10**12) == 1
    cron = CronSpec(("0", "*", "*", "*", "*"))
    assert ticks_between(cron, LAST_MS - 3_600_000, ENDED_MS + 10**12) == [LAST_MS + 1 - 3_600_000]
    definition = Definition(name="n", task="t", spec=spec, jitter=float(SECONDS_MAX))
    plan = plan_schedule("n", definition, LAST_MS + 1 - 3_600_000, LAST_MS)
    assert plan.fire == (LAST_MS + 1 - 3_600_000,) and plan.next_tick_ms is None


# -- 2. the validator crashed instead of refusing --------------------------------------------
@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ({"schedule": "0 3 * * *", "tz": "Europe"}, "tz", 'tz "Europe" is not an IANA zone'),
        ({"schedule": "CRON_TZ=America 0 3 * * *"}, "schedule", 'tz "America" is not an IANA'),
        ({"schedule": "0-² * * * *"}, "schedule", "is not a valid cron expression"),
        ({"schedule": "0-" + "9" * 5000 + " * * * *"}, "schedule", "not a valid cron"),
        ({"schedule": "@every 1h", "jitter": 10**400}, "jitter", "jitter (a 1329-bit number) s"),
        ({"schedule": "@every 1h", "max_lateness": -(10**5000)}, "max_lateness", "is negative"),
        ({"schedule": "@every 1h", "expires": 10**400}, "expires", "longer than 100 years"),
        ({"schedule": "@every 1h", "expires": -(10**400)}, "expires", "is not positive"),
        ({"schedule": 10**400}, "schedule", "an interval of (a 1329-bit number) s is longer"),
        ({"schedule": -(10**400)}, "schedule", "(a 1329-bit number) s is not positive"),
        ({"schedule": -1e308}, "schedule", "an interval of -1e+308 s is not positive"),
        ({"schedule": "@every:9223372036854775808"}, "schedule", "longer than 100 years"),
        ({"schedule": "@every:" + "9" * 5000}, "schedule", "the interval is longer than 100"),
        ({"schedule": "@every 1h", "kwargs": {"a": _nested(1000)}}, "kwargs", "deeper than 32"),
        ({"schedule": "@every 1h", "args": [_nested(900)]}, "args", "nests deeper than 32"),
        ({"schedule": "@every 1h", "options": _nested(900)}, "options", "nests deeper"),
        (
            {"schedule": "@every 1h", "kwargs": {"a": "x" * ARGS_BYTES_MAX}},
            "kwargs",
            f"kwargs serialises to {ARGS_BYTES_MAX + 8} bytes of JSON, more than 65536 (64 KiB)",
        ),
        ({"schedule": "@every 1h", "args": [10**5000]}, "args", "a number too large"),
        ({"schedule": "@every 1h", "args": ["\ud800"]}, "args", "not valid Unicode"),
        ({"schedule": "@every 1h", "missed": 10**5000}, "missed", "missed (a 16610-bit number)"),
        ({"schedule": "@every 1h", "missed": [_nested(900)]}, "missed", "missed a list is not"),
        ({"schedule": "@every 1h", "enabled": _nested(900)}, "enabled", "enabled a dict is not"),
        ({"schedule": "@every 1h", "backfill_max": 10**5000}, "backfill_max", "bit number)"),
        ({"schedule": "0 3 * * *", "tz": _nested(900)}, "tz", "tz a dict is not an IANA"),
        ({"schedule": "@every 1h", "pause_on_failure": 2**31}, "pause_on_failure", "more than"),
        ({"schedule": "@every 1h", "start_at": "x" * 100}, "start_at", "'... is not an ISO"),
    ],
)
def test_what_crashed_the_validator_is_refused(
    entry: dict[str, Any], field: str, words: str
) -> None:
    assert words in _problems(entry)[field]


def test_options_are_held_to_the_depth_bound_only() -> None:
    big = {"headers": {"a": "x" * ARGS_BYTES_MAX}}
    assert value_problem("options", big, bounded=False) is None
    assert value_problem("kwargs", big) is not None


def test_show_number_quotes_scalars_and_names_the_rest() -> None:
    assert show_number(1.5) == "1.5"
    assert show_number(None) == "None"
    assert show_number("ab") == "'ab'"
    assert show_number(2**65) == "(a 66-bit number)"
    assert show_number({1}) == "a set"


# -- 3. names --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("", "non-empty string of at most 200"),
        ("x" * (NAME_MAX + 1), "non-empty string of at most 200"),
        ("a\x00b", "the control character '\\x00'"),
        ("a\nb", "the control character '\\n'"),
        ("a\tb", "the control character '\\t'"),
        ("a\x85b", "the control character '\\x85'"),
        *[(f"x{suffix}", f'ends in "{suffix}"') for suffix in RESERVED_SUFFIXES],
        ("x/Enqueue-Events", 'ends in "/enqueue-events"'),
        ("İ" * 101, "lower-case form has 202 characters"),  # the store's key column holds 200
    ],
)
def test_names_outside_the_bounds_are_refused(name: str, words: str) -> None:
    assert words in _problems({"schedule": "@every 1h"}, name)["name"]


def test_names_that_only_contain_an_action_word_are_kept() -> None:
    for name in ("pause", "x/pause/daily", "x/paused", "ünïcode name", "x" * NAME_MAX, "İ" * 100):
        assert validate_entry(name, {"task": "t", "schedule": "@every 1h"}).name == name


# -- at the bounds: accepted, and every reader answers ----------------------------------------
AT_THE_BOUNDS: dict[str, Any] = {
    "task": "proj.t",
    "schedule": timedelta(seconds=SECONDS_MAX),
    "start_at": "1900-01-01T00:00:00+00:00",
    "end_at": "9999-12-31T23:59:59.999+00:00",
    "kwargs": _nested(ARGS_DEPTH_MAX),
    "args": ["x" * (ARGS_BYTES_MAX - 4)],
    "jitter": SECONDS_MAX,
    "max_lateness": float(SECONDS_MAX),
    "expires": timedelta(seconds=SECONDS_MAX),
    "pause_on_failure": 2**31 - 1,
}


def test_a_definition_at_every_bound_is_accepted_and_read() -> None:
    (valid,) = validate_entries({"y" * NAME_MAX: AT_THE_BOUNDS})
    assert valid.start_at_ms == FIRST_MS and valid.end_at_ms == LAST_MS
    assert valid.spec == IntervalSpec(INTERVAL_MAX_MS)
    words = describe_bounds(valid.start_at_ms, valid.end_at_ms, valid.expires, valid.tz)
    assert "from 1900-01-01 until 9999-12-31 23:59:59" in words
    assert describe(valid.spec) == "every 36525 days"
    assert tick_isoformat(LAST_MS, valid.tz).startswith("9999-12-31T23:59:59")
    assert len(ticks_after(valid, NOW_MS, 100)) == 80  # 2070 .. 9970, then ended
    cron = validate_entry(
        "c", {"task": "t", "schedule": "59 23 31 12 *", "end_at": "9999-12-31T23:59:59Z"}
    )
    assert ticks_after(cron, _ms("9998-06-01T00:00:00+00:00"), 5)[-1] == LAST_MS - 59_999


# -- every surface goes through it ------------------------------------------------------------
def _app(beat_schedule: dict[str, Any]) -> Celery:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(durable_beat_url="sqlite:///never-opened.sqlite3", beat_schedule=beat_schedule)
    return app


def test_check_and_the_api_refuse_with_the_same_problem(memory_store: MemoryStore) -> None:
    bad = {"task": "proj.t", "schedule": "@every 1h", "kwargs": {"a": _nested(1000)}}
    verdict = check_config(_app({"deep": bad}))
    assert not verdict.ok
    beat = DurableBeat(_app({}), store=memory_store)
    with pytest.raises(ConfigError) as from_api:
        beat.upsert("deep", bad)
    assert [str(p) for p in from_api.value.problems] == [str(p) for p in verdict.problems]
    with pytest.raises(ConfigError, match="control character"):
        beat.upsert("a\nb", {"task": "proj.t", "schedule": "@every 1h"})
    assert beat.list() == []


def test_an_upserted_year_9999_schedule_reads_back_ended(memory_store: MemoryStore) -> None:
    beat = DurableBeat(_app({}), store=memory_store)
    late = datetime(9999, 12, 31, 23, 30, tzinfo=timezone.utc)
    entry = {"task": "proj.t", "schedule": "@every 1m", "start_at": late}
    beat.upsert("late", entry)
    (view,) = beat.list()
    assert view.next_tick is not None and view.next_tick.startswith("9999-12-31T23:30")
    assert beat.get("late", count=100).next[-1].startswith("9999-12-31T23:59")
