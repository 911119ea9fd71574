"""What ``args``, ``kwargs`` and ``options`` may hold: JSON values, within the bounds.

Definitions are stored as JSON and ticks travel as JSON task messages, so anything else (a
``datetime``, a ``BeatLazyFunc``, a set) is refused with the replacement to use. ``args`` and
``kwargs`` are also bounded (SPEC §2): the depth is measured first, without recursing, so that a
value nested thousands deep is refused rather than crashing the recursive walks after it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from celery_durable_beat.schedules.bounds import nesting_problem, size_problem

_JSON_VALUES = "use strings, numbers, booleans, None, lists and dicts with string keys"
_FIXES = {
    "BeatLazyFunc": (
        "stock beat calls it at each tick; here use the {{scheduled_for}} or "
        "{{scheduled_for_ms}} placeholder, which beat fills with each tick's planned instant"
    ),
    "datetime": (
        "use an ISO 8601 string, or the {{scheduled_for}} placeholder for the tick's instant"
    ),
    "date": "use an ISO 8601 string such as '2026-12-01'",
}
"""The replacement a refusal names for what stock beat accepts in args, kwargs and options
(SPEC §14); anything else gets the list of JSON values."""


def value_problem(field: str, value: object, *, bounded: bool = True) -> str | None:
    """Why ``value`` cannot be stored for ``field``, or None.

    ``bounded`` applies the depth and size bounds of ``args`` and ``kwargs``; ``options`` is
    only held to the depth bound, which keeps the walks below safe.
    """
    deep = nesting_problem(field, value)
    if deep is not None:
        return deep
    bad = _first_non_json(value)
    if bad is not None:
        what, kind = bad
        fix = _FIXES.get(kind, _JSON_VALUES)
        return f"{field} holds {what}, which cannot be stored as JSON; {fix}"
    return size_problem(field, value) if bounded else None


def _first_non_json(value: object) -> tuple[str, str] | None:
    """What in ``value`` is not a JSON value (described, and its type's name), or None."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (repr(value), "float")
    if isinstance(value, (list, tuple)):
        return next((b for b in map(_first_non_json, value) if b is not None), None)
    if isinstance(value, Mapping):
        return _first_non_json_mapping(value)
    kind = type(value).__name__
    return f"a {kind}", kind


def _first_non_json_mapping(value: Mapping[object, object]) -> tuple[str, str] | None:
    for key, item in value.items():
        if not isinstance(key, str):
            return f"the non-string key {key!r}", "key"
        bad = _first_non_json(item)
        if bad is not None:
            return bad
    return None
