"""``start_at`` and ``end_at``: the window a schedule ticks in, read and bounded (SPEC §2).

Each is an aware ``datetime`` or an ISO 8601 text with an offset, kept as epoch milliseconds.
Both must lie in years 1900-9999 in UTC and on the wall clock of the schedule's zone, because
every read surface shows them in that zone, and the first tick from ``start_at`` must come
before the end of year 9999. Problems are returned as ``(field, problem)`` pairs for the
validator's collector.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from celery_durable_beat.schedules.bounds import LAST_MS, instant_problem, show_number
from celery_durable_beat.schedules.dst import zone
from celery_durable_beat.schedules.occurrences import next_tick
from celery_durable_beat.schedules.spec import AtSpec, ScheduleSpec

Problems = list[tuple[str, str]]
_EXAMPLE = 'give e.g. "2026-12-01T00:00:00+01:00" or an aware datetime'


def check_window(
    entry: Mapping[str, Any], spec: ScheduleSpec | None, problems: Problems
) -> dict[str, int | None]:
    """``start_at_ms`` / ``end_at_ms``; the end must come after the start. Without a valid
    ``spec`` the instants are held to the bounds in UTC only."""
    tz = spec.tz if spec is not None else "UTC"
    start = _instant(entry, "start_at", tz, problems)
    end = _instant(entry, "end_at", tz, problems)
    if start is not None and end is not None and end <= start:
        problems.append(
            (
                "end_at",
                f"end_at {entry['end_at']!s} is not after start_at {entry['start_at']!s}; "
                "give an end_at later than start_at",
            )
        )
        end = None
    # An @at before start_at simply never fires (no tick, like one after end_at): not refused.
    planned = None if isinstance(spec, AtSpec) else spec
    if planned is not None and start is not None and next_tick(planned, start - 1) > LAST_MS:
        problems.append(
            (
                "start_at",
                f"start_at {entry['start_at']!s} leaves no tick before the end of year 9999; "
                "give an earlier start_at",
            )
        )
        start = None
    return {"start_at_ms": start, "end_at_ms": end}


def _instant(entry: Mapping[str, Any], field: str, tz: str, problems: Problems) -> int | None:
    """An aware ``datetime`` or an ISO 8601 text with an offset, as epoch milliseconds."""
    value = entry.get(field)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            problems.append(
                (field, f"{field} {show_number(value)} is not an ISO 8601 instant; {_EXAMPLE}")
            )
            return None
    if not isinstance(value, datetime):
        problems.append((field, f"{field} is a {type(value).__name__}; {_EXAMPLE}"))
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        problems.append((field, f"{field} {value.isoformat()} has no UTC offset; {_EXAMPLE}"))
        return None
    ms = round(value.timestamp() * 1000)
    problem = instant_problem(field, value.isoformat(), ms, zone(tz))
    if problem is not None:
        problems.append((field, problem))
        return None
    return ms
