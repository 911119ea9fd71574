"""Stored values turned into shown ones, where a value that cannot be shown is said, not raised.

SPEC §2 bounds what validation accepts, so nothing it accepts fails a read; but a store may hold
rows written by hand or by an older version: an instant in year 20000, a zone that is not one,
a cron that no longer parses, args nested a thousand deep, a name with a newline. Every read
surface (``list``, ``show``, ``next``, ``history``, the console, the API) goes through the
control views, and the views turn stored values into shown ones only through :class:`Shown`.
It catches the few errors such a value raises (``OverflowError``, ``ValueError``, zoneinfo's,
``OSError`` from a zone lookup that meets a tzdata folder) at that one place and records a
:class:`FieldProblem` naming the field, so the row shows that field as invalid and everything
else still answers.

The shape (``docs/operations.md``, "Rows that cannot be shown"): a view whose stored values
are all showable is unchanged; otherwise its ``to_json()`` has ``"invalid": [{"field",
"problem"}, …]`` and each field named there holds a stand-in (``INVALID`` for text, null,
or an empty list or object), never a value to act on. Two exceptions: ``name`` keeps the
stored name, the row's identity, and ``tz`` holds the zone the instants are shown in (UTC when
the stored one is not a zone; the problem quotes the stored one).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from zoneinfo import ZoneInfoNotFoundError

from croniter import croniter

from celery_durable_beat.exceptions import OccurrenceSearchError
from celery_durable_beat.schedules import bounds
from celery_durable_beat.schedules.custom import CustomSpec
from celery_durable_beat.schedules.errors import SpecError
from celery_durable_beat.schedules.render import tick_isoformat
from celery_durable_beat.schedules.rrule import RRuleSpec, parse_rrule
from celery_durable_beat.schedules.solar import SolarSpec, solar_spec
from celery_durable_beat.schedules.spec import AtSpec, CronSpec, IntervalSpec, ScheduleSpec
from celery_durable_beat.schedules.validate import zone_problem
from celery_durable_beat.schedules.values import value_problem

T = TypeVar("T")

INVALID = "<invalid>"
"""What a text field holds when its stored value cannot be shown (``invalid`` says why)."""
NAME_MAX = bounds.NAME_MAX
FIRST_MS = bounds.FIRST_MS
"""1900-01-01T00:00:00Z: no instant before it is shown (SPEC §2 bounds)."""
END_MS = bounds.LAST_MS + 1
"""10000-01-01T00:00:00Z: no instant at or after it is shown (SPEC §2 bounds)."""
MAX_SECONDS = bounds.SECONDS_MAX
"""The bounds validation holds definitions to (``schedules/bounds.py``): a stored value past
them is shown as invalid."""

PLAN_ERRORS = (
    OverflowError,
    ValueError,
    OSError,
    ZoneInfoNotFoundError,
    OccurrenceSearchError,
)
"""What planning a stored schedule raises when a stored value is outside what it can compute:
an instant past ``datetime``'s years (``OverflowError``), a cron croniter refuses
(``ValueError``), a zone that is a tzdata folder (``OSError``) or none at all."""


@dataclass(frozen=True)
class FieldProblem:
    """One field of a stored row that cannot be shown, and why (an ``invalid`` entry)."""

    field: str
    problem: str

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "problem": self.problem}


def spec_problem(spec: ScheduleSpec) -> str | None:
    """Why a stored schedule spec cannot be planned, or None when it can be."""
    if isinstance(spec, IntervalSpec):
        return _interval_problem(spec)
    if isinstance(spec, AtSpec):
        at = spec.at_ms
        if isinstance(at, bool) or not isinstance(at, int) or not FIRST_MS <= at < END_MS:
            return f"the @at instant {at!r} ms is not in years 1900-9999"
        return None
    if isinstance(spec, CronSpec):
        return _cron_problem(spec)
    return _kind_problem(spec)


def _interval_problem(spec: IntervalSpec) -> str | None:
    every = spec.every_ms
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        return f"the interval {every!r} ms is not a positive whole number"
    if every > MAX_SECONDS * 1000:
        return f"the interval of {every} ms is over 100 years"
    return None


def _kind_problem(spec: SolarSpec | RRuleSpec | CustomSpec) -> str | None:
    """A stored solar event or rule read back as validation reads it (a row written by hand
    or by another version); a custom class is the config's object, judged when asked."""
    try:
        if isinstance(spec, SolarSpec):
            solar_spec(spec.event, spec.lat, spec.lon, spec.tz)
        elif isinstance(spec, RRuleSpec):
            parse_rrule(spec.rule, spec.tz)
        elif not (isinstance(spec.path, str) and isinstance(spec.shown, str)):
            return "the stored custom schedule does not name its class and repr() as text"
    except SpecError as exc:
        return str(exc)
    except (TypeError, ValueError, AttributeError):  # a field of the wrong type, by hand
        return "the stored schedule's fields are not of the types its kind has"
    return None


def _cron_problem(spec: CronSpec) -> str | None:
    fields = spec.fields
    if len(fields) not in (5, 6) or not all(isinstance(f, str) for f in fields):
        return "the stored cron does not have 5 or 6 text fields"
    if not croniter.is_valid(" ".join(fields), second_at_beginning=len(fields) == 6):
        return f"{' '.join(fields)!r} is not a valid cron expression"
    return None


def payload_problem(value: object, field: str = "the value") -> str | None:
    """Why stored args, kwargs or options cannot be shown, or None when they can be: the check
    validation makes (``schedules/values.py``), which measures the depth without recursion
    before anything walks the value, so a value nested a thousand deep costs no
    ``RecursionError``."""
    return value_problem(field, value)


def seconds_problem(value: object) -> str | None:
    """Why a stored number of seconds cannot be shown, or None when it can be."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r} is not a number of seconds"
    if not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
        return f"{value!r} s is not a number from 0 to 100 years"
    return None


class Shown:
    """The shown values of one stored row, and the problems met making them.

    ``tz`` is the stored zone; when it is not one, instants are shown in UTC (their offset says
    so) and ``plannable`` is False, like for a spec that cannot be planned.
    """

    def __init__(self, tz: object, spec: ScheduleSpec | None, exclude_tz: object = None) -> None:
        self.problems: list[FieldProblem] = []
        tz_problem = zone_problem(tz)
        if tz_problem is not None:
            self.add("tz", tz_problem)
        # the zone the exclude dates are read in (an interval's is the app's, stored with them)
        exclude_problem = None if exclude_tz is None else zone_problem(exclude_tz)
        if exclude_problem is not None:
            self.add("exclude", exclude_problem)
        self.zone = "UTC" if tz_problem is not None or not isinstance(tz, str) else tz
        spec_error = None if spec is None else spec_problem(spec)
        if spec_error is not None:
            self.add("schedule", spec_error)
        self.plannable = (
            spec is not None
            and tz_problem is None
            and exclude_problem is None
            and spec_error is None
        )

    def add(self, field: str, problem: str) -> None:
        self.problems.append(FieldProblem(field, problem))

    def instant(self, field: str, ms: object) -> str | None:
        """``ms`` in the row's zone, ISO 8601; None (and a problem) when it cannot be shown."""
        if ms is None:
            return None
        if isinstance(ms, bool) or not isinstance(ms, int):
            self.add(field, f"{ms!r} is not an instant in epoch milliseconds")
            return None
        if not FIRST_MS <= ms < END_MS:
            self.add(field, f"the instant {ms} ms lies outside the years 1900-9999")
            return None
        try:
            return tick_isoformat(ms, self.zone)
        except (OverflowError, ValueError):
            self.add(field, f"the instant {ms} ms cannot be shown in {self.zone}")
            return None

    def seconds(self, field: str, value: object) -> Any:
        """A stored number of seconds as it is, or None (and a problem) when it is not one."""
        problem = None if value is None else seconds_problem(value)
        if problem is not None:
            self.add(field, problem)
            return None
        return value

    def payload(self, field: str, value: T, empty: T) -> T:
        """Stored args, kwargs or options as they are, or ``empty`` (and a problem)."""
        problem = payload_problem(value, f"the stored {field}")
        if problem is not None:
            self.add(field, problem)
            return empty
        return value

    def text(self, field: str, value: object) -> str:
        """A stored text as it is, or ``INVALID`` (and a problem) when it is not text."""
        if isinstance(value, str):
            return value
        self.add(field, f"{type(value).__name__} is not text")
        return INVALID

    def planned(self, field: str, compute: Callable[[], T], fallback: T) -> T:
        """What ``compute`` plans from the stored schedule, or ``fallback`` (and a problem)
        when the stored values cannot be planned."""
        if not self.plannable:
            self.add(field, "not computed: the stored schedule or tz is invalid")
            return fallback
        try:
            return compute()
        except PLAN_ERRORS as exc:
            self.add(field, f"cannot be computed from the stored values ({type(exc).__name__})")
            return fallback
