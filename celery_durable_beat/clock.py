"""Time as a parameter.

The pure core never reads the wall clock: it takes ``now_ms``. The one reader of wall time is
``SystemClock``; tests and ``FrozenBeat`` pass their own clock. Monotonic time is read here too,
because a leader must stop before its lease could have expired whatever the wall clock does.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Protocol

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class Clock(Protocol):
    """Where the beat process reads time."""

    def now_ms(self) -> int:
        """Wall time, UTC epoch milliseconds."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""


class SystemClock:
    """The real clocks of this host."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


def ms_to_datetime(ms: int) -> datetime:
    """An aware UTC datetime for epoch milliseconds (integer arithmetic: no float rounding)."""
    return _EPOCH + timedelta(milliseconds=ms)


def datetime_to_ms(value: datetime) -> int:
    """Epoch milliseconds of an aware datetime (naive ones are refused: they have no instant)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{value!r} is naive; give a timezone-aware datetime")
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
