"""Validation of ``beat_schedule`` entries into :class:`~celery_durable_beat.model.Definition`.

Every problem of a whole config is collected and raised together in one
:class:`~celery_durable_beat.exceptions.ConfigError`: an operator fixing a config should see the
full list at once, not one error per restart. Each problem names the entry, the field, what is
wrong and how to fix it. Celery schedule objects (``crontab``, ``schedule``) are translated into
plain values at the Celery edge before they reach this pure module.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from celery_durable_beat.exceptions import ConfigError, ConfigProblem, OccurrenceSearchError
from celery_durable_beat.ids import name_key
from celery_durable_beat.model import EXPIRES_NEXT_TICK, Definition, MissedPolicy, OverlapPolicy
from celery_durable_beat.schedules.bounds import (
    NAME_MAX as NAME_MAX,  # noqa: PLC0414 (mypy strict: an explicit re-export for the Celery edge)
)
from celery_durable_beat.schedules.bounds import (
    instant_problem,
    name_problem,
    seconds_problem,
    show_number,
)
from celery_durable_beat.schedules.dst import zone
from celery_durable_beat.schedules.errors import SpecError
from celery_durable_beat.schedules.exclude import check_exclude
from celery_durable_beat.schedules.occurrences import next_tick
from celery_durable_beat.schedules.rrule import RRuleSpec
from celery_durable_beat.schedules.spec import (
    AtSpec,
    CronSpec,
    IntervalSpec,
    ParsedSchedule,
    RepeatingSpec,
    ScheduleSpec,
    parse_schedule,
)
from celery_durable_beat.schedules.values import value_problem
from celery_durable_beat.schedules.window import check_window

RELATIVE_REFUSED = (
    "relative=True is not supported: intervals are aligned to the Unix epoch so tick ids "
    "survive restarts; remove relative"
)
"""The refusal of stock beat's ``relative``, as an entry key or on ``schedule(…)`` (SPEC §14)."""
STOCK_KEYS = ("task", "schedule", "args", "kwargs", "options", "relative")
EXTRA_KEYS = (
    "tz",
    "missed",
    "backfill_max",
    "max_lateness",
    "overlap",
    "jitter",
    "enabled",
    "description",
    "start_at",
    "end_at",
    "expires",
    "pause_on_failure",
    "require_worker",
    "exclude",
)
KNOWN_KEYS = frozenset(STOCK_KEYS + EXTRA_KEYS)
BACKFILL_RANGE = (1, 1000)
PAUSE_ON_FAILURE_MAX = 2**31 - 1
"""The most failures ``pause_on_failure`` counts: what any store or JSON reader holds."""
_PROBE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: a cron must fire at least once after it


@dataclass(frozen=True)
class EntryDefaults:
    """What an entry gets when it does not say: the app's zone and missed-run policy."""

    tz: str = "UTC"
    missed: MissedPolicy = MissedPolicy.SKIP


class _Collector:
    def __init__(self, entry: str) -> None:
        self.entry = entry
        self.problems: list[ConfigProblem] = []

    def add(self, field: str, problem: str) -> None:
        self.problems.append(ConfigProblem(self.entry, field, problem))


def validate_entries(
    entries: Mapping[str, Mapping[str, Any]], defaults: EntryDefaults = EntryDefaults()
) -> list[Definition]:
    """Validate a whole ``beat_schedule``; raise one ConfigError listing every problem."""
    problems: list[ConfigProblem] = []
    definitions: list[Definition] = []
    seen: dict[object, str] = {}
    for name, entry in entries.items():
        folded = name_key(name) if isinstance(name, str) else name  # validate_entry reports others
        if folded in seen:
            problems.append(
                ConfigProblem(
                    name,
                    "name",
                    (
                        f'name clashes with "{seen[folded]}" (names are case-insensitive); '
                        "rename one of them"
                    ),
                )
            )
            continue
        seen[folded] = name
        try:
            definitions.append(validate_entry(name, entry, defaults))
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return definitions


def validate_entry(
    name: object, entry: object, defaults: EntryDefaults = EntryDefaults()
) -> Definition:
    """Validate one entry; raise ConfigError with all of its problems."""
    label = name if isinstance(name, str) else repr(name)
    found = _Collector(label)
    bad_name = name_problem(name)
    if bad_name is not None:
        found.add("name", bad_name)
    if not isinstance(entry, Mapping):
        found.add("entry", f"the entry is a {type(entry).__name__}; give a dict")
        raise ConfigError(found.problems)
    _check_unknown_keys(entry, found)
    values = _check_fields(entry, defaults, found)
    if found.problems:
        raise ConfigError(found.problems)
    return Definition(name=label, **values)


def _check_unknown_keys(entry: Mapping[str, Any], found: _Collector) -> None:
    for key in entry:
        if key not in KNOWN_KEYS:
            close = difflib.get_close_matches(str(key), sorted(KNOWN_KEYS), n=1)
            hint = (
                f'did you mean "{close[0]}"?'
                if close
                else f"known keys: {', '.join(sorted(KNOWN_KEYS))}"
            )
            found.add(str(key), f'unknown key "{key}"; {hint}')


def _check_fields(
    entry: Mapping[str, Any], defaults: EntryDefaults, found: _Collector
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    task = entry.get("task")
    if not isinstance(task, str) or not task.strip():
        found.add("task", 'task is missing; give the task name, e.g. "proj.tasks.cleanup"')
    values["task"] = task
    values["spec"] = _check_schedule(entry, defaults, found)
    values["args"] = _check_args(entry.get("args"), found)
    values["kwargs"] = _check_mapping(entry, "kwargs", found)
    values["options"] = _check_mapping(entry, "options", found)
    values["missed"] = _check_choice(entry, "missed", MissedPolicy, defaults.missed, found)
    values["overlap"] = _check_choice(entry, "overlap", OverlapPolicy, OverlapPolicy.ALLOW, found)
    values["backfill_max"] = _check_backfill(entry.get("backfill_max", 10), found)
    values["max_lateness"] = _check_seconds(entry, "max_lateness", None, found)
    values["jitter"] = _check_seconds(entry, "jitter", 0.0, found) or 0.0
    values["enabled"] = _check_bool(entry, "enabled", found)
    values["description"] = _check_description(entry.get("description"), found)
    window: list[tuple[str, str]] = []
    values.update(check_window(entry, values["spec"], window))
    for field, problem in window:
        found.add(field, problem)
    values["expires"] = _check_expires(entry, found)
    values["pause_on_failure"] = _check_pause_on_failure(entry.get("pause_on_failure"), found)
    values["require_worker"] = _check_bool(entry, "require_worker", found, default=False)
    exclude_problems: list[tuple[str, str]] = []
    values["exclude"] = check_exclude(
        entry.get("exclude"), values["spec"], defaults.tz, exclude_problems
    )
    for field, problem in exclude_problems:
        found.add(field, problem)
    if entry.get("relative"):
        found.add("relative", RELATIVE_REFUSED)
    return values


def _check_schedule(
    entry: Mapping[str, Any], defaults: EntryDefaults, found: _Collector
) -> ScheduleSpec | None:
    if "schedule" not in entry:
        found.add("schedule", 'schedule is missing; give e.g. "0 3 * * *" or "@every 30s"')
        return None
    explicit_tz = entry.get("tz")
    tz_ok = explicit_tz is None or _check_zone(explicit_tz, "tz", found)
    try:
        parsed = parse_schedule(
            entry["schedule"], explicit_tz if tz_ok and explicit_tz else defaults.tz
        )
    except SpecError as exc:
        found.add("schedule", str(exc))
        return None
    if isinstance(parsed.spec, IntervalSpec):
        if explicit_tz is not None:
            found.add(
                "tz",
                "an interval is aligned to the Unix epoch in UTC and takes no tz; "
                "remove tz or use a cron expression",
            )
        return parsed.spec
    if isinstance(parsed.spec, AtSpec):
        return _check_at(parsed.spec, explicit_tz, tz_ok, defaults, found)
    zones_ok = _check_cron_zones(parsed, explicit_tz, defaults, found)
    return parsed.spec if tz_ok and zones_ok and _fires(parsed.spec, found) else None


def _fires(spec: RepeatingSpec, found: _Collector) -> bool:
    """A repeating spec must be searchable: a cron whose fields never match, or a custom class
    whose ``next_after`` fails or answers something that is not an instant after the one asked
    about, is refused now rather than quarantined at its first round."""
    try:
        next_tick(spec, _PROBE_MS)
    except OccurrenceSearchError as exc:
        if isinstance(spec, CronSpec):
            problem = f'"{spec.expr}" never fires; check the day and month fields'
        else:
            problem = str(exc)
        found.add("schedule", problem)
        return False
    return True


def _check_at(
    spec: AtSpec, explicit_tz: object, tz_ok: bool, defaults: EntryDefaults, found: _Collector
) -> AtSpec | None:
    """An ``@at`` instant in years 1900-9999 in UTC and in the zone it is shown in (``tz``,
    else the app's zone)."""
    if not tz_ok or (explicit_tz is None and not _check_zone(defaults.tz, "tz", found)):
        return None
    try:
        shown = spec.text()
    except (OverflowError, ValueError):  # year 1 or 9999 pushed out of range by the zone
        shown = f"@at ({spec.at_ms} ms since 1970)"
    problem = instant_problem("schedule", shown, spec.at_ms, zone(spec.tz))
    if problem is not None:
        found.add("schedule", problem)
        return None
    return spec


def _check_cron_zones(
    parsed: ParsedSchedule, explicit_tz: object, defaults: EntryDefaults, found: _Collector
) -> bool:
    """A ``CRON_TZ=`` zone must exist and agree with ``tz``; else the default zone must exist."""
    if parsed.cron_tz is None:
        return explicit_tz is not None or _check_zone(defaults.tz, "tz", found)
    if not _check_zone(parsed.cron_tz, "schedule", found):
        return False
    if explicit_tz is not None and explicit_tz != parsed.cron_tz:
        where = (
            f"the rule's DTSTART;TZID={parsed.cron_tz}"
            if isinstance(parsed.spec, RRuleSpec)
            else f"CRON_TZ={parsed.cron_tz}"
        )
        found.add("tz", f'tz "{explicit_tz}" conflicts with {where}; keep only one of them')
        return False
    return True


@lru_cache(maxsize=1)
def _zone_names() -> dict[str, str]:
    return {z.lower(): z for z in available_timezones()}


def zone_problem(name: object) -> str | None:
    """Why ``name`` is not an IANA zone, with a suggestion, or None when it is one."""
    if not isinstance(name, str) or not name:
        return f'tz {show_number(name)} is not an IANA zone name; use e.g. "Europe/Berlin"'
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder such as "Europe"
        pass
    else:
        return None
    names = _zone_names()
    lowered = name.lower().replace(" ", "_")
    by_city = [z for low, z in names.items() if low == lowered or low.endswith("/" + lowered)]
    close = by_city or difflib.get_close_matches(name, sorted(names.values()), n=1)
    example = close[0] if close else "Europe/Berlin"
    return f'tz "{name}" is not an IANA zone; use e.g. "{example}"'


def _check_zone(name: object, field: str, found: _Collector) -> bool:
    problem = zone_problem(name)
    if problem:
        found.add(field, problem)
    return problem is None


def _check_args(value: object, found: _Collector) -> tuple[Any, ...]:
    if value is None:  # stock Celery reads a missing or None args as no arguments
        return ()
    if not isinstance(value, (list, tuple)):
        found.add("args", f"args is a {type(value).__name__}; give a list, e.g. [1, 2]")
        return ()
    _check_json("args", value, found)
    return tuple(value)


def _check_mapping(entry: Mapping[str, Any], field: str, found: _Collector) -> dict[str, Any]:
    value = entry.get(field) or {}
    if not isinstance(value, Mapping):
        found.add(field, f"{field} is a {type(value).__name__}; give a dict")
        return {}
    _check_json(field, value, found)
    return dict(value)


def _check_json(field: str, value: object, found: _Collector) -> None:
    """JSON values only; ``args`` and ``kwargs`` also within the depth and size bounds."""
    problem = value_problem(field, value, bounded=field != "options")
    if problem is not None:
        found.add(field, problem)


def _check_choice(
    entry: Mapping[str, Any], field: str, enum: Any, default: Any, found: _Collector
) -> Any:
    value = entry.get(field, default)
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        shown = f'"{value}"' if isinstance(value, str) else show_number(value)
        found.add(field, f"{field} {shown} is not one of {allowed}")
        return default


def _check_backfill(value: object, found: _Collector) -> int:
    low, high = BACKFILL_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        found.add(
            "backfill_max",
            f"backfill_max {show_number(value)} is not a whole number in {low}..{high}",
        )
        return 10
    return value


def _check_seconds(
    entry: Mapping[str, Any], field: str, default: float | None, found: _Collector
) -> float | None:
    value = entry.get(field, default)
    if value is None:
        return None
    number = _number(value)
    if number is None:
        found.add(field, f"{field} {show_number(value)} is not a number of seconds")
        return default
    if number < 0:
        found.add(field, f"{field} {show_number(number)} is negative; give seconds >= 0")
        return default
    return _within_bound(field, number, default, found)


def _number(value: object) -> int | float | None:
    """A finite number of seconds (a ``timedelta`` read as its seconds), or None. An int is
    never turned into a float here: one past the float range would raise ``OverflowError``."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _within_bound(
    field: str, number: int | float, default: float | None, found: _Collector
) -> float | None:
    """``number`` as a float when it is at most 100 years (SPEC §2), else ``default``."""
    too_long = seconds_problem(field, number)
    if too_long is not None:
        found.add(field, too_long)
        return default
    return float(number)


def _check_bool(
    entry: Mapping[str, Any], field: str, found: _Collector, default: bool = True
) -> bool:
    value = entry.get(field, default)
    if not isinstance(value, bool):
        found.add(field, f"{field} {show_number(value)} is not true or false")
        return default
    return value


def _check_expires(entry: Mapping[str, Any], found: _Collector) -> float | str | None:
    """``"next_tick"`` or seconds > 0; the entry's ``options`` must not set it as well."""
    value = entry.get("expires")
    if value is None:
        return None
    options = entry.get("options")
    if isinstance(options, Mapping) and options.get("expires") is not None:
        found.add("expires", "expires is set twice (also in options); keep only the expires key")
        return None
    if value == EXPIRES_NEXT_TICK:
        return EXPIRES_NEXT_TICK
    number = _number(value)
    if number is None:
        shown = show_number(value)
        found.add("expires", f'expires {shown} is not "next_tick" or a number of seconds')
        return None
    if number <= 0:
        found.add("expires", f"expires {show_number(number)} is not positive; give seconds > 0")
        return None
    return _within_bound("expires", number, None, found)


def _check_pause_on_failure(value: object, found: _Collector) -> int | None:
    if value is None:
        return None
    shown = show_number(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        found.add(
            "pause_on_failure", f"pause_on_failure {shown} is not a whole number >= 1; give e.g. 3"
        )
        return None
    if value > PAUSE_ON_FAILURE_MAX:
        found.add(
            "pause_on_failure",
            f"pause_on_failure {shown} is more than {PAUSE_ON_FAILURE_MAX}; give e.g. 3",
        )
        return None
    return value


def _check_description(value: object, found: _Collector) -> str | None:
    if value is None or isinstance(value, str):
        return value
    found.add("description", f"description is a {type(value).__name__}; give text")
    return None
