"""Schedule specs: what a ``schedule`` value means, as immutable values.

Two kinds exist. A cron spec matches fields on the wall clock of its zone; an interval spec
fires every ``every_ms`` milliseconds aligned to the Unix epoch in UTC, so tick identities do not
depend on when a beat process started.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from croniter import croniter

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_EVERY_MS = re.compile(r"@every:(\d+)")
_EVERY_UNIT = re.compile(r"@every\s+(\d+)\s*([smhd])")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_CRON_TZ = re.compile(r"CRON_TZ=(\S+)\s+(.*)", re.DOTALL)
_RANDOM_FIELD = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)
"""croniter's ``R``/``H`` fields: drawn per croniter object, so tick ids would differ by process."""


@dataclass(frozen=True)
class CronSpec:
    """A cron expression read on the wall clock of ``tz``.

    ``fields`` are 5 (minute first) or 6 (seconds first) whitespace-separated fields.
    """

    fields: tuple[str, ...]
    tz: str = "UTC"

    @property
    def has_seconds(self) -> bool:
        return len(self.fields) == 6

    @property
    def expr(self) -> str:
        return " ".join(self.fields)

    @property
    def is_fixed_time(self) -> bool:
        """Classic cron's test: neither the minute nor the hour field starts with ``*``."""
        minute, hour = self.fields[-5], self.fields[-4]
        return not (minute.startswith("*") or hour.startswith("*"))

    def text(self) -> str:
        return self.expr


@dataclass(frozen=True)
class IntervalSpec:
    """Every ``every_ms`` milliseconds, at instants that are multiples of it since the epoch."""

    every_ms: int

    @property
    def tz(self) -> str:
        return "UTC"

    def text(self) -> str:
        for unit in ("d", "h", "m", "s"):
            if self.every_ms % _UNIT_MS[unit] == 0:
                return f"@every {self.every_ms // _UNIT_MS[unit]}{unit}"
        return f"@every:{self.every_ms}"


ScheduleSpec = CronSpec | IntervalSpec


class SpecError(ValueError):
    """A schedule value that cannot be understood; the message says what to write instead."""


@dataclass(frozen=True)
class ParsedSchedule:
    """A parsed ``schedule`` value; ``cron_tz`` is the zone of a ``CRON_TZ=`` prefix if any."""

    spec: ScheduleSpec
    cron_tz: str | None = None


def parse_schedule(value: object, tz: str = "UTC") -> ParsedSchedule:
    """Parse a ``schedule`` value of the forms in SPEC §2 (Celery objects are translated first).

    ``tz`` is the zone a cron expression is read in unless a ``CRON_TZ=`` prefix names one.
    """
    if isinstance(value, bool):
        raise SpecError(f"{value!r} is a bool; give a cron string, '@every 30s', or seconds")
    if isinstance(value, (int, float)):
        return ParsedSchedule(_interval_from_seconds(float(value)))
    if isinstance(value, timedelta):
        return ParsedSchedule(_interval_from_seconds(value.total_seconds()))
    if isinstance(value, str):
        return _parse_string(value.strip(), tz)
    raise SpecError(
        f"{type(value).__name__} is not a supported schedule; use a cron string, "
        "'@every 30s', a number of seconds, a timedelta, crontab() or schedule()"
    )


def _interval_from_seconds(seconds: float) -> IntervalSpec:
    if not math.isfinite(seconds):
        raise SpecError(f"an interval of {seconds!r} s is not a number; give e.g. 30")
    every_ms = round(seconds * 1000)
    if every_ms < 1:
        raise SpecError(f"an interval of {seconds!r} s is not positive; give at least 0.001")
    return IntervalSpec(every_ms)


def _parse_string(text: str, tz: str) -> ParsedSchedule:
    cron_tz: str | None = None
    prefixed = _CRON_TZ.fullmatch(text)
    if prefixed:
        cron_tz, text = prefixed.group(1), prefixed.group(2).strip()
    if text.startswith("@every"):
        if cron_tz is not None:
            raise SpecError("an interval is aligned to the Unix epoch in UTC; remove CRON_TZ=")
        return ParsedSchedule(_parse_every(text))
    fields = tuple(NICKNAMES.get(text.lower(), text).split())
    if len(fields) not in (5, 6):
        raise SpecError(
            f"{text!r} has {len(fields)} fields; a cron expression has 5 "
            "(minute hour day month weekday) or 6 (a leading seconds field)"
        )
    if any(_RANDOM_FIELD.fullmatch(field) for field in fields):
        raise SpecError(
            f"{text!r} uses a random or hashed field (R, H), which would differ between beat "
            "processes; write the minute, hour etc. out"
        )
    if any(_equal_range(field) for field in fields):
        raise SpecError(
            f"{text!r} has a range with equal ends such as 5-5, which croniter reads as the "
            "whole field; write the single value (5) instead"
        )
    if not croniter.is_valid(" ".join(fields), second_at_beginning=len(fields) == 6):
        raise SpecError(f"{text!r} is not a valid cron expression; check each field's range")
    return ParsedSchedule(CronSpec(fields, cron_tz or tz), cron_tz)


def _equal_range(field: str) -> bool:
    """Whether a field holds a range like ``5-5`` or ``MON-mon`` (classic cron: one value)."""
    for item in field.split(","):
        low, dash, high = item.partition("/")[0].partition("-")
        if dash and _range_end(low) == _range_end(high):
            return True
    return False


def _range_end(text: str) -> str:
    return str(int(text)) if text.isdigit() else text.lower()


def _parse_every(text: str) -> IntervalSpec:
    by_ms = _EVERY_MS.fullmatch(text)
    if by_ms:
        every_ms = int(by_ms.group(1))
    else:
        by_unit = _EVERY_UNIT.fullmatch(text)
        if not by_unit:
            raise SpecError(f"{text!r} is not an interval; write '@every:<ms>' or '@every 30s'")
        every_ms = int(by_unit.group(1)) * _UNIT_MS[by_unit.group(2)]
    if every_ms < 1:
        raise SpecError(f"{text!r} is not a positive interval")
    return IntervalSpec(every_ms)


def spec_to_json(spec: ScheduleSpec) -> dict[str, Any]:
    if isinstance(spec, IntervalSpec):
        return {"kind": "interval", "every_ms": spec.every_ms}
    return {"kind": "cron", "fields": list(spec.fields), "tz": spec.tz}


def spec_from_json(data: dict[str, Any]) -> ScheduleSpec:
    if data["kind"] == "interval":
        return IntervalSpec(int(data["every_ms"]))
    if data["kind"] == "cron":
        return CronSpec(tuple(data["fields"]), data["tz"])
    raise ValueError(f"unknown schedule kind {data['kind']!r}")
