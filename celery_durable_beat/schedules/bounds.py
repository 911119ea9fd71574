"""The bounds of a definition (SPEC §2), as constants and pure checks.

Every surface (config, ``check``, the API, importers) validates through
:mod:`celery_durable_beat.schedules.validate`, which asks these checks. The bounds exist so that
nothing validation accepts can later fail a read or a round: Python's ``datetime`` ends at year
9999, the store's interval column is a BIGINT of milliseconds, JSON readers recurse, and the
URL of a schedule's actions ends in the action's name. Each check answers a one-line problem
naming the field, the bound and the fix, or None.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

NAME_MAX = 200
"""The longest schedule name (the store's ``name`` column)."""
RESERVED_SUFFIXES = ("/pause", "/resume", "/trigger", "/archive", "/enqueue-events", "/backfill")
"""What a name must not end in: the API's action URLs are ``/schedules/<name>/<action>``."""

YEAR_MIN, YEAR_MAX = 1900, 9999
"""Every instant of a definition lies in these years, in UTC and in the schedule's zone."""
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
FIRST_MS = (datetime(YEAR_MIN, 1, 1, tzinfo=timezone.utc) - _EPOCH) // timedelta(milliseconds=1)
"""1900-01-01T00:00:00Z in epoch milliseconds."""
LAST_MS = (
    datetime(YEAR_MAX, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc) - _EPOCH
) // timedelta(milliseconds=1)
"""9999-12-31T23:59:59.999Z in epoch milliseconds: past it, a schedule has ended."""

SECONDS_MAX = 36_525 * 86_400
"""100 years (of 365.25 days) in seconds: the longest interval, jitter, lateness or expiry."""
INTERVAL_MAX_MS = SECONDS_MAX * 1000
"""The longest interval in milliseconds (well inside the store's BIGINT)."""

ARGS_DEPTH_MAX = 32
"""How deep args and kwargs may nest (the outer list or dict is level 1)."""
ARGS_BYTES_MAX = 64 * 1024
"""The most bytes args, or kwargs, may take as compact UTF-8 JSON."""


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a schedule, or None."""
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
        return f"the name must be a non-empty string of at most {NAME_MAX} characters"
    control = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        return (
            f"the name holds the control character {control!r}; "
            "remove newlines, tabs, NUL and other control characters"
        )
    folded = name.lower()
    if len(folded) > NAME_MAX:  # e.g. "İ" lower-cases to two characters
        return (
            f"the name's lower-case form has {len(folded)} characters (names compare "
            f"case-insensitively); shorten it to at most {NAME_MAX} in that form"
        )
    suffix = next((s for s in RESERVED_SUFFIXES if folded.endswith(s)), None)
    if suffix is not None:
        return (
            f'the name ends in "{suffix}", which the API reads as an action; '
            f"rename it (names must not end in {', '.join(RESERVED_SUFFIXES)})"
        )
    return None


def _years_out(ms: int, tz: ZoneInfo) -> str | None:
    """Where the instant leaves years 1900-9999 (``before year 1900 in UTC``, ``past year 9999
    in America/New_York``), or None when it lies inside them in UTC and in ``tz``."""
    if ms < FIRST_MS:
        return f"before year {YEAR_MIN} in UTC"
    if ms > LAST_MS:
        return f"past year {YEAR_MAX} in UTC"
    try:
        year = (_EPOCH + timedelta(milliseconds=ms)).astimezone(tz).year
    except OverflowError:  # the wall clock is past 9999-12-31
        year = YEAR_MAX + 1
    if year < YEAR_MIN:
        return f"before year {YEAR_MIN} in {tz.key}"
    if year > YEAR_MAX:
        return f"past year {YEAR_MAX} in {tz.key}"
    return None


def instant_problem(field: str, shown: str, ms: int, tz: ZoneInfo) -> str | None:
    """Why the instant ``shown`` (as the user wrote it) is out of bounds in ``tz``, or None."""
    where = _years_out(ms, tz)
    if where is None:
        return None
    return f"{field} {shown} is {where}; give an instant in years {YEAR_MIN}-{YEAR_MAX}"


def seconds_problem(field: str, value: int | float) -> str | None:
    """Why a number of seconds is longer than 100 years, or None (an ``int`` too large for a
    float is compared as it is, never converted)."""
    if value <= SECONDS_MAX:
        return None
    return (
        f"{field} {show_number(value)} s is longer than 100 years; "
        f"give at most {SECONDS_MAX} seconds"
    )


def show_number(value: object) -> str:
    """A given value, for a message: ``repr`` of a short scalar, else what it is. Python refuses
    to turn an int of more than 4300 digits into text, and ``repr`` of a list nested thousands
    deep raises ``RecursionError``: a refusal must never crash on what it quotes."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"(a {value.bit_length()}-bit number)"
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else f"{value[:77]!r}..."
    return f"a {type(value).__name__}"


def nesting_problem(field: str, value: object) -> str | None:
    """Why ``value`` nests deeper than ``ARGS_DEPTH_MAX``, or None.

    Walked with an explicit stack, never recursing: a value nested thousands deep is refused,
    not a ``RecursionError``.
    """
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = _children(item)
        if children is None:
            continue
        if depth > ARGS_DEPTH_MAX:
            return (
                f"{field} nests deeper than {ARGS_DEPTH_MAX} levels of lists and dicts; "
                "flatten it or pass a reference (an id, a path) instead"
            )
        stack.extend((child, depth + 1) for child in children)
    return None


def _children(value: object) -> list[object] | None:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, Mapping):
        return list(value.values())
    return None


def size_problem(field: str, value: object) -> str | None:
    """Why ``value`` (JSON-able, at most ``ARGS_DEPTH_MAX`` deep) serialises to more than
    ``ARGS_BYTES_MAX`` bytes, or None."""
    try:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    except UnicodeEncodeError:
        return f"{field} holds text that is not valid Unicode (a lone surrogate); fix the text"
    except ValueError:  # an int past Python's int -> str digit limit
        return f"{field} holds a number too large to serialise; pass it as a string"
    if size <= ARGS_BYTES_MAX:
        return None
    return (
        f"{field} serialises to {size} bytes of JSON, more than {ARGS_BYTES_MAX} (64 KiB); "
        "pass a reference (an id, a path) instead of the data"
    )
