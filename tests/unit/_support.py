"""Helpers shared by the unit tests: instants as ISO strings, and an independent cron oracle.

The oracle answers "which instants does this cron fire at in (after, until]?" by brute force:
it walks every real second (or minute) of the window in UTC, reads the wall clock of the zone at
that instant and matches the fields with its own tiny parser, then applies SPEC §5 directly. It
shares no code with croniter or :mod:`celery_durable_beat.schedules.dst`, so agreeing with it
means something.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from celery_durable_beat.clock import datetime_to_ms

UTC = timezone.utc

ZONES = ("America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu", "UTC")

# The 2026 offset changes of the zones above, as UTC epoch milliseconds.
TRANSITIONS_MS = {
    "ny-spring": datetime_to_ms(datetime(2026, 3, 8, 7, 0, tzinfo=UTC)),
    "ny-fall": datetime_to_ms(datetime(2026, 11, 1, 6, 0, tzinfo=UTC)),
    "berlin-spring": datetime_to_ms(datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
    "berlin-fall": datetime_to_ms(datetime(2026, 10, 25, 1, 0, tzinfo=UTC)),
    "lord-howe-fall": datetime_to_ms(datetime(2026, 4, 4, 15, 0, tzinfo=UTC)),
    "lord-howe-spring": datetime_to_ms(datetime(2026, 10, 3, 15, 30, tzinfo=UTC)),
}

_RANGES = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "dom": (1, 31),
    "month": (1, 12),
    "dow": (0, 6),
}


def ms(iso: str) -> int:
    """Epoch ms of an ISO 8601 string with an offset."""
    return datetime_to_ms(datetime.fromisoformat(iso))


def field_values(field: str, kind: str) -> frozenset[int]:
    """The values a numeric cron field matches (``*``, ``a``, ``a-b``, ``/n`` and lists)."""
    low, high = _RANGES[kind]
    values: set[int] = set()
    for item in field.split(","):
        body, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if body == "*":
            first, last = low, high
        elif "-" in body:
            first_text, last_text = body.split("-")
            first, last = int(first_text), int(last_text)
        else:
            first = int(body)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return frozenset(values)


def make_matcher(fields: Sequence[str]) -> Callable[[datetime], bool]:
    """A predicate on naive wall times; at most one of day-of-month / day-of-week restricted."""
    padded = list(fields) if len(fields) == 6 else ["0", *fields]
    names = ("second", "minute", "hour", "dom", "month", "dow")
    sets = {name: field_values(field, name) for field, name in zip(padded, names, strict=True)}
    assert "*" in (padded[3], padded[5]), "the oracle does not model day-of-month OR weekday"

    def matches(wall: datetime) -> bool:
        return (
            wall.second in sets["second"]
            and wall.minute in sets["minute"]
            and wall.hour in sets["hour"]
            and wall.day in sets["dom"]
            and wall.month in sets["month"]
            and (wall.weekday() + 1) % 7 in sets["dow"]
        )

    return matches


def oracle_ticks(fields: Sequence[str], tz: str, after_ms: int, until_ms: int) -> list[int]:
    """Every tick of the cron in ``(after_ms, until_ms]`` by SPEC §5, by brute force."""
    zone = ZoneInfo(tz)
    matches = make_matcher(fields)
    fixed = not (fields[-5].startswith("*") or fields[-4].startswith("*"))
    step = 1 if len(fields) == 6 else 60
    found: set[int] = set()
    t = (after_ms // 1000) // step * step
    while t * 1000 <= until_ms:
        if t * 1000 > after_ms:
            local = datetime.fromtimestamp(t, zone)
            before = datetime.fromtimestamp(t - step, zone)
            wall = local.replace(tzinfo=None)
            repeated = (
                wall.replace(tzinfo=zone, fold=0).utcoffset()
                != wall.replace(tzinfo=zone, fold=1).utcoffset()
            )
            if matches(wall) and not (fixed and repeated and local.fold == 1):
                found.add(t * 1000)
            jump = local.utcoffset() - before.utcoffset()  # type: ignore[operator]
            if fixed and jump > timedelta(0) and _gap_matches(before, local, step, matches):
                found.add(t * 1000)  # the first valid instant after the gap
        t += step
    return sorted(found)


def _gap_matches(
    before: datetime, after: datetime, step: int, matches: Callable[[datetime], bool]
) -> bool:
    wall = before.replace(tzinfo=None) + timedelta(seconds=step)
    end = after.replace(tzinfo=None)
    while wall < end:
        if matches(wall):
            return True
        wall += timedelta(seconds=step)
    return False


class FakeClock:
    """Wall and monotonic time that move only when told (``sleep`` and ``advance`` alike)."""

    def __init__(self, start_ms: int = 1_780_000_000_000) -> None:
        self.ms = start_ms

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.ms / 1000

    def sleep(self, seconds: float) -> None:
        self.ms += round(seconds * 1000)

    advance = sleep
