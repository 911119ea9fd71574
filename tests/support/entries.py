"""Hypothesis strategies for ``beat_schedule`` entries, at and beyond every bound of SPEC §2.

Shared by the generative tests (``tests/unit/test_fuzz_validate.py``,
``tests/integration/test_fuzz_definitions.py``). They draw what a Celery user can write: every
``schedule`` form (seconds, ``timedelta``, ``@every``, cron strings with ``CRON_TZ=``, Celery's
``crontab`` and ``schedule``, a refused ``solar``), every extra key of ``validate.py``, and names
and values picked at the edges: years 1, 1900, 9999 and 10000, offsets of ±14 h, huge integers,
``1e308``, ``nan`` and ``inf``, zone folders such as ``"Europe"``, unicode digits in cron fields,
control characters, names ending in ``/pause``, deep and large ``args``/``kwargs``. Most draws are
refused by validation; what it accepts must then be readable everywhere (SPEC §2 "Bounds").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from typing import Any

from celery.schedules import crontab, schedule, solar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROUTE_SUFFIXES = ("/pause", "/resume", "/trigger", "/archive", "/enqueue-events")

# -- names -------------------------------------------------------------------------------------
_NAME_ALPHABET = st.characters(codec="utf-8") | st.sampled_from(
    ["\x00", "\n", "\t", "\r", "\x7f", "\u2028", "\u200b", "/", "%", "?", "#", ".", " ", "é", "ß"]
)
names = st.one_of(
    st.sampled_from(["nightly", "a", "A", "x" * 200, "x" * 201, "", " ", ".", "..", "a/b"]),
    st.text(_NAME_ALPHABET, min_size=0, max_size=40),
    st.builds(
        lambda base, suffix: base + suffix,
        st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=0, max_size=8),
        st.sampled_from([*ROUTE_SUFFIXES, "/PAUSE", "/", "/x", "/pause/"]),
    ),
    st.builds(lambda n, c: c * n, st.integers(190, 210), st.sampled_from(["n", "é", "日", "🎉"])),
)

# -- numbers at the edges ----------------------------------------------------------------------
HUNDRED_YEARS_S = 100 * 365.25 * 86_400
edge_numbers = st.sampled_from(
    [
        0,
        -1,
        0.0004,
        0.001,
        1,
        5,
        59.9999,
        86_400,
        HUNDRED_YEARS_S,
        HUNDRED_YEARS_S + 1,
        2**31,
        2**53 + 1,
        2**63,
        2**64,
        10**20,
        10**400,
        1e308,
        -1e308,
        float("nan"),
        float("inf"),
        float("-inf"),
        True,
    ]
)
numbers = st.one_of(
    edge_numbers,
    st.integers(min_value=-(10**6), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
)
timedeltas = st.one_of(
    st.timedeltas(),
    st.sampled_from(
        [timedelta(0), timedelta(microseconds=1), timedelta(seconds=30), timedelta.max]
    ),
)

# -- zones -------------------------------------------------------------------------------------
zones = st.sampled_from(
    [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Asia/Kathmandu",
        "Pacific/Kiritimati",  # +14
        "Pacific/Pago_Pago",  # -11
        "Etc/GMT-14",
        "Etc/GMT+12",
        "Europe",  # a tzdata folder, not a zone
        "America",
        "localtime",
        "Factory",
        "posixrules",
        "../etc/passwd",
        "Bogota",
        "europe/berlin",
        "",
        " UTC",
        "UTC\x00",
    ]
)

# -- schedules ---------------------------------------------------------------------------------
_DIGITS = st.sampled_from(
    ["0", "5", "59", "60", "7", "31", "32", "\u0663", "\uff15", "00", "-1", "99999"]
)
_cron_field = st.one_of(
    st.sampled_from(["*", "?", "L", "1W", "5#2", "MON-FRI", "jan", "*/0", "*/15", "1-5", "5-5"]),
    _DIGITS,
    st.builds(lambda a, b: f"{a}-{b}", _DIGITS, _DIGITS),
    st.builds(lambda a, b: f"{a},{b}", _DIGITS, _DIGITS),
    st.builds(lambda a, b: f"{a}/{b}", st.sampled_from(["*", "0", "1-30"]), _DIGITS),
)
cron_strings = st.one_of(
    st.sampled_from(
        ["0 3 * * *", "*/10 * * * * *", "@hourly", "@daily", "@weekly", "@monthly", "@yearly"]
    ),
    st.sampled_from(["0 0 31 2 *", "0 0 29 2 *", "0 0 30 2 *", "59 23 31 12 *", "0 0 1 1 * *"]),
    st.lists(_cron_field, min_size=4, max_size=7).map(" ".join),
)
cron_tz_strings = st.builds(lambda zone, cron: f"CRON_TZ={zone} {cron}", zones, cron_strings)
every_strings = st.one_of(
    st.builds(
        lambda n, unit: f"@every {n}{unit}",
        st.one_of(st.integers(0, 10**14), st.sampled_from(["\u0665", "\u0660", "1" * 30])),
        st.sampled_from(["s", "m", "h", "d", "w", ""]),
    ),
    st.builds(lambda n: f"@every:{n}", st.one_of(st.integers(0, 10**20), st.just("\u0665"))),
)


def _crontab(minute: str, hour: str, dom: str, month: str, dow: str) -> Any:
    """A ``crontab``, or None where Celery refuses it already (a day that never occurs)."""
    try:
        return crontab(
            minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow
        )
    except ValueError:
        return None


def _solar() -> Any:
    """A ``solar`` schedule without its constructor, which needs ``ephem`` (not installed)."""
    value = solar.__new__(solar)
    value.event, value.lat, value.lon = "sunrise", 48.1, 11.6
    return value


crontabs = st.builds(
    _crontab,
    st.sampled_from(["*", "0", "*/15", "0,30", "59"]),
    st.sampled_from(["*", "3", "0-23/2", "23"]),
    st.sampled_from(["*", "1", "29", "30", "31"]),
    st.sampled_from(["*", "2", "1,7", "12"]),
    st.sampled_from(["*", "mon-fri", "0", "sun"]),
).filter(lambda value: value is not None)
celery_schedules = st.builds(
    lambda every, relative: schedule(every, relative=relative),
    st.one_of(timedeltas.filter(lambda d: d.total_seconds() > 0), st.floats(0.001, 1e12)),
    st.booleans(),
)
schedules = st.one_of(
    cron_strings,
    cron_tz_strings,
    every_strings,
    numbers,
    timedeltas,
    crontabs,
    celery_schedules,
    st.sampled_from([None, "", [], {}, "@reboot", "every 5m"]),
    st.builds(_solar),  # refused
)

# -- instants ----------------------------------------------------------------------------------
_offsets = st.sampled_from([timezone.utc, *(timezone(timedelta(hours=h)) for h in (-14, -12, 14))])
_aware = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
    st.sampled_from(
        [
            datetime(1, 1, 1),
            datetime(1899, 12, 31, 23),
            datetime(1900, 1, 1),
            datetime(2026, 1, 1),
            datetime(9999, 12, 31, 12),
            datetime(9999, 12, 31, 23, 59, 59, 999_999),
        ]
    ),
).flatmap(lambda naive: _offsets.map(lambda tz: naive.replace(tzinfo=tz)))
instants = st.one_of(
    _aware,
    _aware.map(datetime.isoformat),
    st.sampled_from(
        [
            "10000-01-01T00:00:00+00:00",
            "0001-01-01T00:00:00+14:00",
            "9999-12-31T23:59:59-14:00",
            "2026-12-01T00:00:00",  # no offset
            "2026-12-01",
            "yesterday",
            "2026-12-01T00:00:00+24:00",
        ]
    ),
    st.datetimes(),  # naive
)

# -- args and kwargs ---------------------------------------------------------------------------
_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**64, -(2**63) - 1, 10**400, 1e308, float("nan"), float("inf")]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(_NAME_ALPHABET, max_size=20),
    st.sampled_from(["{{scheduled_for}}", "{{scheduled_for_ms}}", "\x00", "\ud800"]),
)
_json = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(_NAME_ALPHABET, max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


deep = st.builds(_nested, st.sampled_from([30, 31, 32, 33, 40, 200]), _json_leaf)
large = st.builds(lambda n: "x" * n, st.sampled_from([65_000, 65_536, 70_000, 300_000]))
args_values = st.one_of(
    st.lists(st.one_of(_json, deep, large), max_size=3),
    st.sampled_from([None, (), "not a list", {"a": 1}]),
)
kwargs_values = st.one_of(
    st.dictionaries(
        st.text(_NAME_ALPHABET, max_size=12), st.one_of(_json, deep, large), max_size=4
    ),
    st.sampled_from([None, [], {1: "non-string key"}, {"api_password": "hunter2"}]),
)
options_values = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "queue": st.sampled_from(["celery", "", "q\x00"]),
            "priority": numbers,
            "expires": numbers,
            "countdown": numbers,
            "headers": kwargs_values,
        },
    ),
    st.sampled_from([None, "not a dict"]),
)

# -- entries -----------------------------------------------------------------------------------
tasks = st.one_of(
    st.sampled_from(["proj.tasks.cleanup", "", " ", "t\x00", "x" * 300, None, 5]),
    st.text(_NAME_ALPHABET, min_size=1, max_size=20),
)
seconds_values = st.one_of(numbers, timedeltas, st.sampled_from([None, "5", "next_tick"]))

_dates = st.one_of(
    st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)).map(date.isoformat),
    st.dates(min_value=date(1900, 1, 1), max_value=date(9999, 12, 31)),
    st.sampled_from(["1899-12-31", "9999-12-31", "2026-02-30", "2026-1-1", "", "2026-W01-1"]),
    st.just(datetime(2026, 1, 1, tzinfo=timezone.utc)),
    edge_numbers,
)
_exclude_items = st.one_of(
    _dates,
    st.fixed_dictionaries({"from": _dates, "to": _dates}),
    st.fixed_dictionaries({"from": _dates}),
    st.sampled_from([{}, [], None]),
)
exclude_values = st.one_of(
    st.lists(_exclude_items, max_size=5),
    st.just(["2026-12-25"] * 1001),
    st.sampled_from(["2026-12-25", {"from": "2026-12-25", "to": "2026-12-26"}, 7]),
)
"""``exclude`` values (SPEC §15): dates and ranges at and past the bounds, bad shapes, too many."""
_valid_dates = st.dates(min_value=date(1900, 1, 1), max_value=date(9999, 12, 31))
valid_excludes = st.lists(
    st.one_of(
        _valid_dates.map(date.isoformat),
        st.tuples(_valid_dates, _valid_dates).map(
            lambda pair: {"from": min(pair).isoformat(), "to": max(pair).isoformat()}
        ),
    ),
    max_size=4,
)
"""``exclude`` lists inside the bounds (any date in years 1900-9999, ranges the right way)."""
at_schedules = st.one_of(instants.map(lambda value: f"@at {value}"), _aware)
"""``@at`` schedules: text and aware ``datetime`` instants at and past the bounds (SPEC §15)."""

entries = st.fixed_dictionaries(
    {"task": tasks, "schedule": st.one_of(schedules, at_schedules)},
    optional={
        "args": args_values,
        "kwargs": kwargs_values,
        "options": options_values,
        "tz": zones,
        "missed": st.sampled_from(["skip", "run_once", "backfill", "SKIP", "", None]),
        "backfill_max": st.one_of(st.integers(-1, 1001), edge_numbers),
        "max_lateness": seconds_values,
        "overlap": st.sampled_from(["allow", "skip", "replace", "buffer_one", "queue", None]),
        "jitter": seconds_values,
        "enabled": st.sampled_from([True, False, None, 1, "yes"]),
        "description": st.one_of(
            st.none(), st.text(_NAME_ALPHABET, max_size=50), large, st.just(7)
        ),
        "start_at": instants,
        "end_at": instants,
        "expires": seconds_values,
        "pause_on_failure": st.one_of(st.integers(-1, 10), edge_numbers),
        "require_worker": st.sampled_from([True, False, None, "no"]),
        "exclude": exclude_values,
        "relative": st.booleans(),
        "unknown_key": st.just(1),
    },
)
"""One ``beat_schedule`` entry, anything Celery config or an API body could hold: mostly refused."""

_valid_tasks = st.sampled_from(["proj.tasks.cleanup", "proj.report", "t", "x" * 300, "日本.タスク"])
_plausible_schedules = st.one_of(
    st.sampled_from(["0 3 * * *", "*/10 * * * * *", "@every 30s", "@daily", 30, 0.5]),
    at_schedules,
    cron_tz_strings,
    every_strings,
    edge_numbers,
    timedeltas,
    crontabs,
)
_plausible_seconds = st.one_of(edge_numbers, timedeltas, st.just("next_tick"))
plausible_entries = st.fixed_dictionaries(
    {"task": _valid_tasks, "schedule": _plausible_schedules},
    optional={
        "args": args_values,
        "kwargs": kwargs_values,
        "options": st.sampled_from([{}, {"queue": "celery"}, {"priority": 9}]),
        "tz": st.sampled_from(["UTC", "Pacific/Kiritimati", "Etc/GMT+12", "Europe"]),
        "max_lateness": _plausible_seconds,
        "jitter": _plausible_seconds,
        "expires": _plausible_seconds,
        "description": st.one_of(st.text(_NAME_ALPHABET, max_size=50), large),
        "start_at": instants,
        "end_at": instants,
        "pause_on_failure": st.one_of(st.integers(1, 10), edge_numbers),
        "backfill_max": st.sampled_from([1, 1000]),
        "missed": st.sampled_from(["skip", "run_once", "backfill"]),
        "overlap": st.sampled_from(["allow", "skip", "replace"]),
        "enabled": st.booleans(),
        "exclude": valid_excludes,
    },
)
"""An entry close to valid, with a few values at an edge: what validation most often accepts, so
the read surfaces see many accepted edge values."""
# -- mostly valid: every value inside the bounds, many of them at the bounds ------------------
_valid_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20),
    st.sampled_from(["{{scheduled_for}}", "{{scheduled_for_ms}}", "\x00", "x" * 60_000]),
)
_valid_json = st.recursive(
    _valid_json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
_bounded_seconds = st.one_of(
    st.integers(0, int(HUNDRED_YEARS_S)),
    st.floats(0, HUNDRED_YEARS_S),
    st.sampled_from([0, 1, int(HUNDRED_YEARS_S), HUNDRED_YEARS_S, timedelta(days=36_525)]),
)
_bounded_instants = st.datetimes(
    min_value=datetime(1900, 1, 2), max_value=datetime(9999, 12, 30)
).flatmap(lambda naive: _offsets.map(lambda tz: naive.replace(tzinfo=tz).isoformat()))
valid_names = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cc", "Cs"]), min_size=1, max_size=200
)
"""Names inside the bounds (unicode, ``/``, spaces, up to 200 characters); a rare one ending in
an action suffix is refused."""
valid_entries = st.fixed_dictionaries(
    {
        "task": st.sampled_from(["proj.tasks.cleanup", "proj.report", "日本.タスク"]),
        "schedule": st.one_of(
            st.sampled_from(
                ["0 3 * * *", "*/10 * * * * *", "@every 30s", "@daily", "0 0 29 2 *", 0.001]
            ),
            cron_tz_strings,
            st.integers(1, int(HUNDRED_YEARS_S)),
            st.floats(0.001, HUNDRED_YEARS_S),
            st.timedeltas(min_value=timedelta(milliseconds=1), max_value=timedelta(days=36_525)),
            _bounded_instants.map(lambda value: f"@at {value}"),
        ),
    },
    optional={
        "args": st.lists(_valid_json, max_size=3),
        "kwargs": st.dictionaries(st.text(max_size=10), _valid_json, max_size=3),
        "options": st.sampled_from([{}, {"queue": "celery"}, {"priority": 9}]),
        "max_lateness": _bounded_seconds,
        "jitter": _bounded_seconds,
        "expires": st.one_of(
            st.integers(1, int(HUNDRED_YEARS_S)),
            st.floats(0.001, HUNDRED_YEARS_S),
            st.just("next_tick"),
        ),
        "description": st.text(max_size=50),
        "start_at": _bounded_instants,
        "end_at": _bounded_instants,
        "missed": st.sampled_from(["skip", "run_once", "backfill"]),
        "overlap": st.sampled_from(["allow", "skip", "replace", "buffer_one"]),
        "enabled": st.booleans(),
        "exclude": valid_excludes,
    },
)
"""Entries whose every value lies inside SPEC §2's bounds, many at a bound (100 years, years 1900
and 9999, offsets of ±14 h, 60,000-character strings): most are accepted (a few are refused, e.g.
an ``end_at`` before ``start_at``), so the read surfaces see many accepted edge values."""
cases = st.one_of(
    st.tuples(valid_names, valid_entries),
    st.tuples(valid_names, plausible_entries),
    st.tuples(names, entries),
)
"""(name, entry) pairs: a third inside the bounds (mostly accepted, at the bounds), a third close
to valid with values at an edge, a third anything at all (mostly refused)."""


_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


def count_cases(
    try_case: Callable[[str, Any], bool], *, max_examples: int, derandomize: bool
) -> Counter[str]:
    """Draw ``max_examples`` of ``cases`` (derandomized: the same ones on every machine; never
    an example database) and give each to ``try_case``, which returns whether validation
    accepted it (and then reads it); the counts of drawn, accepted and refused cases."""
    counts: Counter[str] = Counter()

    @settings(
        max_examples=max_examples,
        derandomize=derandomize,
        database=None,
        deadline=None,
        suppress_health_check=_HEALTH,
    )
    @given(cases)
    def check(case: tuple[str, Any]) -> None:
        counts["drawn"] += 1
        counts["accepted" if try_case(*case) else "refused"] += 1

    check()
    return counts
